#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/<target>/ from files in the repository and a
few hand-written inputs. Deterministic; rerun after changing a target's input layout.

Layouts follow FuzzedDataProvider: ConsumeRandomLengthString takes bytes from the front up to a
backslash followed by another byte ("\\\\" is one literal backslash), ConsumeBool / integers take
bytes from the end.
"""
import glob
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, 'fuzz', 'corpus')


def rls(s: bytes) -> bytes:
    """A ConsumeRandomLengthString field: escaped, then terminated."""
    return s.replace(b'\\', b'\\\\') + b'\\\n'


def write(target, name, data: bytes):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def read(path):
    with open(os.path.join(ROOT, path), 'rb') as f:
        return f.read()


def safetensors(tensors, metadata=None):
    header, data = {}, b''
    if metadata is not None:
        header['__metadata__'] = metadata
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {'dtype': dtype, 'shape': shape,
                        'data_offsets': [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header, separators=(',', ':')).encode()
    return struct.pack('<Q', len(h)) + h + data


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    # safetensors: last byte bit 0 = sharded.
    one = safetensors({'model.embed_tokens.weight': ('BF16', [4, 2], bytes(16)),
                       'model.norm.weight': ('F32', [2], struct.pack('<2f', 1, 2))},
                      {'format': 'pt'})
    write('safetensors', 'single', one + b'\x00')
    write('safetensors', 'dtypes', safetensors({
        'a': ('F16', [3], bytes(6)), 'b': ('I8', [2, 2], bytes(4)), 'c': ('U8', [0], b''),
        'd': ('I64', [1], bytes(8)), 'e': ('BOOL', [], b'\x01'), 'f': ('F64', [1], bytes(8)),
        'g': ('I16', [1], bytes(2)), 'h': ('I32', [1], bytes(4))}) + b'\x00')
    index = {'metadata': {'total_size': 24},
             'weight_map': {'model.embed_tokens.weight': 'model-00001-of-00001.safetensors',
                            'model.norm.weight': 'model-00001-of-00001.safetensors'}}
    write('safetensors', 'sharded', rls(json.dumps(index).encode()) + one + b'\x01')
    write('safetensors', 'tiny_trained_header',
          read('models/tiny-trained/model.safetensors')[:2048] + b'\x00')

    # config: [module name][config text][mode byte: 0-2 config, 3 generation_config]
    for i, path in enumerate(sorted(glob.glob(os.path.join(ROOT, 'tests/goldens/model/*/config.json')))
                             + [os.path.join(ROOT, 'models/tiny-trained/config.json')]):
        name = os.path.basename(os.path.dirname(path))
        write('config', name, rls(b'model.layers.3.mlp.up_proj') + read(path) + bytes([i % 3]))
    for path in glob.glob(os.path.join(ROOT, 'models/tiny-trained/qat/config.json')):
        write('config', 'tiny_trained_qat', rls(b'lm_head') + read(path) + b'\x01')
    write('config', 'generation', rls(b'') + json.dumps(
        {'do_sample': True, 'temperature': 1.0, 'top_k': 64, 'top_p': 0.95,
         'bos_token_id': 2, 'eos_token_id': [1, 106], 'pad_token_id': 0}).encode() + b'\x03')

    # tokenizer: [probe text][tokenizer.json]
    vocab = {'<unk>': 0, '<bos>': 1, 'a': 2, 'b': 3, 'c': 4, 'ab': 5, 'bc': 6, '\u2581': 7,
             '\u2581a': 8, '<0x63>': 9}
    tok = {'version': '1.0', 'truncation': None, 'padding': None,
           'added_tokens': [{'id': 1, 'content': '<bos>', 'single_word': False, 'lstrip': False,
                             'rstrip': False, 'normalized': False, 'special': True}],
           'normalizer': {'type': 'Replace', 'pattern': {'String': ' '}, 'content': '\u2581'},
           'pre_tokenizer': None, 'post_processor': None,
           'decoder': {'type': 'Sequence', 'decoders': [
               {'type': 'Replace', 'pattern': {'String': '\u2581'}, 'content': ' '},
               {'type': 'ByteFallback'}, {'type': 'Fuse'}]},
           'model': {'type': 'BPE', 'dropout': None, 'unk_token': '<unk>',
                     'continuing_subword_prefix': None, 'end_of_word_suffix': None,
                     'fuse_unk': True, 'byte_fallback': True, 'ignore_merges': False,
                     'vocab': vocab, 'merges': [['a', 'b'], ['b', 'c'], ['\u2581', 'a']]}}
    write('tokenizer', 'small', rls('a abc<bos>c\u00e9'.encode()) + json.dumps(tok).encode())
    tok2 = json.loads(json.dumps(tok))
    tok2['pre_tokenizer'] = {'type': 'Split', 'pattern': {'String': ' '},
                             'behavior': 'MergedWithPrevious', 'invert': False}
    tok2['model']['merges'] = ['a b', 'b c']
    write('tokenizer', 'split_string_merges', rls(b'ab bc abc') + json.dumps(tok2).encode())
    # The trained model's tokenizer cut to its first 300 vocabulary entries (ids stay dense).
    t = json.loads(read('models/tiny-trained/tokenizer.json'))
    keep = {k: v for k, v in t['model']['vocab'].items() if v < 300}
    t['model']['vocab'] = keep
    t['model']['merges'] = [m for m in t['model']['merges']
                            if all(p in keep for p in (m.split(' ') if isinstance(m, str) else m))
                            and ''.join(m.split(' ') if isinstance(m, str) else m) in keep]
    t['added_tokens'] = [a for a in t['added_tokens'] if a['id'] < 300]
    write('tokenizer', 'tiny_trained_cut', rls(b'Hello <|turn>user\n') + json.dumps(t).encode())

    # chat_template: [json {messages, tools}][4 option bytes at the end]
    cases = [json.loads(l) for l in read('tests/goldens/chat/cases.jsonl').decode().split('\n') if l.strip()]
    picked, seen = [], set()
    for c in cases:
        key = tuple(b.split('.')[0] + '.' + b.split('.')[1] for b in c['branches'])
        if any(b not in seen for b in key):
            seen.update(key)
            picked.append(c)
    for i, c in enumerate(picked[:40]):
        doc = {'messages': c['messages']}
        if c.get('tools'):
            doc['tools'] = c['tools']
        flags = bytes([int(c.get('add_generation_prompt', False)), int(c.get('enable_thinking', False)),
                       0, i % 2])
        # ConsumeBool reads from the end: the last byte is the first flag.
        write('chat_template', 'case_%02d' % i, json.dumps(doc).encode() + flags[::-1])

    # output_parser: [text][8 cut bytes at the end]
    outs = [
        '<|channel>thought\nplan <b>{x}</b><channel|>Sure: <|tool_call>call:search{q:<|"|>a, b: '
        '{c}<|"|>,n:[1,-2.5e3,{deep:[null]}]}<tool_call|>tail <|tool_call>call:bad{x}<tool_call|>!',
        '<|channel>thought\nA<b<channel|>T1<|tool_call>call:f{s:<|"|>x}y<|"|>,n:-1}<tool_call|>T2<turn|>',
        'Hello <|chan', '{a:1,b:{c:[true,false,null]},d:<|"|>q<|"|>}',
        '<|tool_call>call:get_weather{location:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>',
        '<|channel>unterminated reasoning', 'x <|tool_response> y <|think|> z',
    ]
    for i, o in enumerate(outs):
        write('output_parser', 'out_%d' % i, o.encode() + bytes([0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb, 0xed, 0x0f]))

    # regex: [pattern][walk][subject]...
    pats = [(r'[a-z]+@[a-z]+\.(com|org)', 'bob@ex.com'), (r'\d{3}-\d{4}', '555-1234'),
            (r'(?P<y>\d{4})-(\d\d)-(\d\d)', '2024-01-31'), (r'(ab|a)*b?', 'abab'),
            (r'[^\s,]+(,\s*[^\s,]+)*', 'a, b,c'), (r'\w+\s\W\D\S', 'ab\t!xy'),
            (r'\x{e9}[\u00e0-\u00ff]{1,3}.', '\u00e9\u00e0\u00e1x'), (r'(?:yes|no)\??', 'yes?'),
            (r'a{2,}b{0,2}c+?', 'aabbc'), (r'^[A-Z][a-z]*( [A-Z][a-z]*)*$', 'Hello World')]
    for i, (p, s) in enumerate(pats):
        write('regex', 'pat_%d' % i, rls(p.encode()) + rls(b'\x10\x20\x30\x40\x50\x60') +
              rls(s.encode()) + rls(s[:-1].encode()))

    # schema: [schema or tools json][seed u32, max_depth, whitespace, require_tool_call, tools]
    schemas = [
        {'type': 'object', 'properties': {'name': {'type': 'string', 'maxLength': 8},
                                          'age': {'type': 'integer', 'minimum': 0}},
         'required': ['name']},
        {'type': 'array', 'items': {'enum': ['a', 'b', 1, None]}, 'maxItems': 3},
        {'anyOf': [{'type': 'number'}, {'type': 'boolean'}, {'const': 'x'}]},
        {'$defs': {'n': {'type': 'object', 'properties': {'next': {'$ref': '#/$defs/n'}}}},
         '$ref': '#/$defs/n'},
        {'type': 'string', 'pattern': '[a-z]{2,4}'},
        {'type': 'object', 'additionalProperties': {'type': 'integer'}, 'maxProperties': 2},
        {'type': 'string', 'format': 'date'},
        {'oneOf': [{'type': 'integer', 'multipleOf': 3}, {'type': 'null'}]},
    ]
    for i, s in enumerate(schemas):
        tail = struct.pack('<I', 1000 + i) + bytes([8, i % 3, 0, 0])
        write('schema', 'schema_%d' % i, json.dumps(s).encode() + tail)
    tools = [{'type': 'function', 'function': {'name': 'get_weather', 'parameters': {
        'type': 'object', 'properties': {'location': {'type': 'string'},
                                         'unit': {'enum': ['c', 'f']}},
        'required': ['location']}}},
             {'name': 'add', 'parameters': {'type': 'object', 'properties': {
                 'a': {'type': 'number'}, 'b': {'type': 'number'}}}}]
    for i in range(2):
        tail = struct.pack('<I', 7 + i) + bytes([8, 0, 1 - i, 1])
        write('schema', 'tools_%d' % i, json.dumps(tools).encode() + tail)

    # server: [body][generate, chat at the end]
    reqs = [
        (True, {'model': 'tiny-trained', 'messages': [{'role': 'user', 'content': 'Hi'}],
                'max_tokens': 2, 'temperature': 0.7, 'top_p': 0.9, 'seed': 1}),
        (True, {'messages': [{'role': 'system', 'content': 'Be brief.'},
                             {'role': 'user', 'content': 'Weather?'},
                             {'role': 'assistant', 'tool_calls': [{'id': 'c1', 'type': 'function',
                              'function': {'name': 'get_weather',
                                           'arguments': '{"location":"Paris"}'}}]},
                             {'role': 'tool', 'tool_call_id': 'c1', 'content': '{"t":21}'}],
                'tools': tools[:1], 'tool_choice': 'required', 'max_tokens': 2}),
        (True, {'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'x'}]}],
                'response_format': {'type': 'json_schema', 'json_schema': {'name': 'n', 'schema': schemas[0]}},
                'logprobs': True, 'top_logprobs': 2, 'n': 2, 'best_of': 2, 'stop': ['\n']}),
        (True, {'messages': [{'role': 'user', 'content': 'x'}], 'regex': '[a-z]+',
                'logit_bias': {'5': -100}, 'frequency_penalty': 0.5, 'presence_penalty': 0.1,
                'repetition_penalty': 1.1, 'min_p': 0.05, 'top_k': 10, 'typical_p': 0.9,
                'chat_template_kwargs': {'enable_thinking': True}, 'reasoning_effort': 'low',
                'stream': True, 'stream_options': {'include_usage': True}}),
        (False, {'prompt': 'Once upon a time', 'max_tokens': 2, 'logprobs': 2, 'echo': False,
                 'stop_token_ids': [1], 'ignore_eos': True}),
        (False, {'prompt': [2, 100, 200], 'response_format': {'type': 'json_object'}}),
    ]
    for i, (chat, body) in enumerate(reqs):
        write('server', 'req_%d' % i, json.dumps(body).encode() + bytes([1, int(chat)]))


if __name__ == '__main__':
    main()
