// Types of gemma-engine.mjs (docs/web.md).

/** The engine's error codes (gemma::ErrorCode names). */
export type ErrorCode =
  | 'invalid_argument' | 'io' | 'format' | 'config' | 'missing_tensor' | 'shape' | 'unsupported'
  | 'capacity' | 'cancelled' | 'callback' | 'tokenizer' | 'template' | 'constraint' | 'device'
  | 'busy' | 'internal';

export class GemmaError extends Error {
  readonly code: ErrorCode;
  /** The request field at fault, when one is. */
  readonly param?: string;
}

export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  /** Text, or parts: `{type: 'text', text}`, images as the server takes them (`{type: 'image',
   * url: DATA_URL, budget?}` or `{type: 'image_url', image_url: {url: DATA_URL}}`; PNG, JPEG, BMP,
   * GIF; WebP, audio and video are not in the module: GemmaError 'unsupported'). */
  content?: string | Array<{ type: string; text?: string; [k: string]: unknown }> | null;
  reasoning?: string;
  tool_calls?: Array<{ type?: 'function'; function: { name: string; arguments: string | object } }>;
  tool_call_id?: string;
  name?: string;
}

export interface Tool {
  type: 'function';
  function: { name: string; description?: string; parameters?: object };
}

/** Text (a raw prompt; <bos> is added), token ids, messages, or messages with tools. */
export type Input =
  | string
  | number[]
  | ChatMessage[]
  | { messages?: ChatMessage[]; prompt?: string | number[]; tools?: Tool[]; thinking?: boolean };

export interface TokenEvent {
  id: number;
  index: number;
  /** Newly completed text (whole UTF-8 characters; may be empty). */
  delta: string;
  /** With logprobs: this token's log-probability. */
  logprob: number | null;
}

/** The HTTP server's request fields (README, "Server"), with its defaults and checks. */
export interface GenerateOptions {
  max_tokens?: number;
  max_completion_tokens?: number;
  temperature?: number;
  top_k?: number;
  top_p?: number;
  min_p?: number;
  typical_p?: number;
  repetition_penalty?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  penalty_window?: number;
  seed?: number;
  stop?: string | string[];
  stop_token_ids?: number[];
  logit_bias?: Record<string, number>;
  /** Messages: true (with top_logprobs); a text prompt: the number of alternatives (/v1/completions). */
  logprobs?: boolean | number;
  top_logprobs?: number;
  ignore_eos?: boolean;
  cache_prompt?: boolean;
  /** Speculative decoding (same output); 'draft_model' needs an engine with a draft model. */
  speculative?: { mode?: 'off' | 'prompt_lookup' | 'draft_model'; max_draft?: number };
  response_format?: { type: 'text' | 'json_object' | 'json_schema' | 'regex'; [k: string]: unknown };
  regex?: string;
  tools?: Tool[];
  tool_choice?: 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };
  chat_template_kwargs?: { enable_thinking?: boolean };
  reasoning_effort?: string;
  /** Cancels: GemmaError 'cancelled'. */
  signal?: AbortSignal;
  /** Called per token; a returned promise holds generation back (at most `window` tokens ahead). */
  onToken?: (t: TokenEvent) => void | Promise<void>;
  window?: number;
}

export interface Telemetry {
  backend: string;
  load_ms: number;
  prompt_tokens: number;
  reused_tokens: number;
  /** Images in the prompt, those run through the vision tower (the others reused) and the tower's
   * time; the same for audio clips; media_ms: decoding and preprocessing all of them. */
  images: number;
  images_encoded: number;
  vision_ms: number;
  audios: number;
  audios_encoded: number;
  audio_ms: number;
  media_ms: number;
  ttft_ms: number;
  prefill_ms: number;
  token_ms: number[];
  itl_median_ms: number;
  itl_p95_ms: number;
  tpot_ms: number;
  total_ms: number;
  decode_tok_s: number;
  overall_tok_s: number;
  resident_bytes: number;
  [k: string]: unknown;
}

/** `gemma-engine run --json`'s object. */
export interface Result {
  text: string;
  raw_text: string;
  reasoning: string;
  tool_calls: Array<{ name: string; arguments: unknown }>;
  parse_errors: string[];
  tokens: number[];
  stop_reason: 'eos' | 'stop_id' | 'stop_string' | 'length' | 'cancelled' | 'constraint_complete';
  constraint_complete?: boolean;
  logprobs?: Array<{ id: number; logprob: number; top: Array<{ id: number; logprob: number }> }>;
  resolved_config: Record<string, unknown>;
  telemetry: Telemetry;
}

export interface EngineInfo {
  backend: string;
  /** The WebGPU adapter ("" on the CPU backends). */
  device: string;
  vocab_size: number;
  context_capacity: number;
  has_tokenizer: boolean;
  load_ms: number;
  shared_bytes: number;
  /** The media the model reads here: images with a vision tower (audio: never in the module). */
  modalities: { image: boolean; audio: boolean };
  chat_template: Record<string, unknown>;
  generation_defaults: Record<string, unknown>;
  handle: number;
  /** Threads the engine runs on (1 unless the pthreads build was loaded). */
  threads: number;
}

export class Session {
  generate(input: Input, options?: GenerateOptions): Promise<Result>;
  score(ids: number[], options?: { logits?: boolean }):
    Promise<{ logprobs: number[]; logits?: number[]; total_ms: number }>;
  /**
   * The HTTP server's /v1/chat/completions (chat) or /v1/completions body answered on this
   * session by the server's code: the response body, or with `stream: true` the SSE text through
   * onEvent. A refusal rejects with a GemmaError carrying `status` and the server's error `body`.
   */
  openai(chat: boolean, body: object, options?: { signal?: AbortSignal; onEvent?: (sse: string) => void }):
    Promise<object | null>;
  reset(): Promise<null>;
  destroy(): Promise<null>;
}

export class Engine {
  readonly info: EngineInfo;
  newSession(): Session;
  tokenize(text: string): Promise<number[]>;
  detokenize(ids: number[]): Promise<string>;
  prompt(input: Input, options?: GenerateOptions): Promise<{ text?: string; tokens: number[] }>;
  /** The HTTP server's /props for this engine. */
  props(): Promise<object>;
  /** Tests: destroys the WebGPU device as a lost GPU would be; the next request fails with code
   *  "device", the one after it rebuilds the device and continues the conversation. */
  loseDevice(): Promise<void>;
  destroy(): Promise<void>;
}

export interface LoadOptions {
  /** A directory path (Node), File objects (read in slices), or files fetched from a URL. */
  model: string | File[] | { url: string | URL; files?: string[]; optional?: string[] };
  /** The model's name in OpenAI bodies (default "model"). */
  name?: string;
  /** "auto": WebGPU where there is a usable adapter, else the CPU (info.backend says which). */
  backend?: 'webgpu' | 'cpu' | 'cpu-ref' | 'auto';
  context?: number;
  /** The WebGPU backend. module, flags (Node only): Dawn for Node (npm `webgpu`), the package's
   *  path or name and its create() flags, e.g. { module: '/path/node_modules/webgpu', flags:
   *  ['backend=vulkan'] }. kernels: "workgroup" (a workgroup per row, head or block: GPUs), "rows"
   *  (one invocation per row: CPU adapters), "auto" (default: rows on CPU adapters such as
   *  SwiftShader, else workgroup); info.device names the adapter and the family. subgroups:
   *  false keeps the workgroup kernels' reductions in workgroup memory; otherwise (default) they
   *  use subgroup operations where the adapter has the `subgroups` feature (info.device then ends
   *  with "workgroup kernels with subgroups"). matvecWorkgroups: the decode matvecs' workgroups
   *  (each loops over row blocks, quantizing the input once); 0 gives every row block its own;
   *  the default is the backend's measured choice. */
  webgpu?: { module?: string; flags?: string[]; kernels?: 'auto' | 'workgroup' | 'rows'; subgroups?: boolean;
             matvecWorkgroups?: number };
  /** > 1: the pthreads build (gemma-engine-mt.js beside the module) with that many threads where
   *  SharedArrayBuffer works (Node, a cross-origin isolated page); otherwise one thread. */
  threads?: number;
  onProgress?: (p: { file: string; loaded: number; total: number }) => void;
  /** Where gemma-engine.js and its .wasm are (default: beside lib/). */
  moduleUrl?: string;
  wasmUrl?: string;
}

export function loadEngine(options: LoadOptions): Promise<Engine>;
