// Hand-written expectations, derived by reading the canonical template
// (/work/shared/reference/gemma4_chat_template.e2b.jinja) and gemma4-spec.md section 5.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include "gemma/error.h"

namespace gemma::chat {
namespace {

std::string Render(const char* messages, const char* tools = "null", bool gen = true,
                   bool think = false, bool preserve = false) {
  ChatTemplateOptions o;
  o.add_generation_prompt = gen;
  o.enable_thinking = think;
  o.preserve_thinking = preserve;
  return RenderChatTemplate(Json::parse(messages), Json::parse(tools), o);
}

// Expects a kTemplate error whose message mentions `where`.
void ExpectTemplateError(const char* messages, const char* tools, const std::string& where) {
  try {
    Render(messages, tools);
    FAIL() << "expected gemma::Error for " << messages;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTemplate);
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateTest, SpecExamples) {
  EXPECT_EQ(Render(R"([{"role":"user","content":"Hello"}])"),
            "<bos><|turn>user\nHello<turn|>\n<|turn>model\n");
  EXPECT_EQ(Render(R"([{"role":"system","content":"SYS"},{"role":"user","content":"Hi"}])"),
            "<bos><|turn>system\nSYS<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  EXPECT_EQ(Render(R"([{"role":"user","content":"Hello"}])", "null", true, true),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHello<turn|>\n<|turn>model\n");
}

TEST(ChatTemplateTest, NoGenerationPromptAndTrim) {
  EXPECT_EQ(Render(R"([{"role":"developer","content":"  D \n"},{"role":"user","content":"\n Q  "},
                       {"role":"assistant","content":" A "}])",
                   "null", false),
            "<bos><|turn>system\nD<turn|>\n<|turn>user\nQ<turn|>\n<|turn>model\nA<turn|>\n");
}

TEST(ChatTemplateTest, SystemContentPartsEachGetATrailingSpace) {
  EXPECT_EQ(Render(R"([{"role":"system","content":[{"type":"text","text":" a "},
                       {"type":"image"},{"type":"text","text":"b"}]}])",
                   "null", false),
            "<bos><|turn>system\na  b <turn|>\n");
}

TEST(ChatTemplateTest, MultimodalPlaceholders) {
  EXPECT_EQ(Render(R"([{"role":"user","content":[{"type":"text","text":"Look "},{"type":"image"},
                       {"type":"image_url","image_url":{"url":"x"}},{"type":"audio"},
                       {"type":"input_audio"},{"type":"video"},{"type":"text","text":" more"}]}])"),
            "<bos><|turn>user\nLook<|image|><|image|><|audio|><|audio|><|video|>more<turn|>\n"
            "<|turn>model\n");
}

TEST(ChatTemplateTest, ToolDeclarationFromSpec) {
  const char* tools =
      R"([{"type":"function","function":{"name":"lookup","description":"Lookup docs",
      "parameters":{"type":"object","properties":{"query":{"type":"string","description":"Search query"},
      "limit":{"type":"integer"}},"required":["query"]}}}])";
  EXPECT_EQ(
      Render(R"([{"role":"user","content":"x"}])", tools, false),
      "<bos><|turn>system\n<|tool>declaration:lookup{description:<|\"|>Lookup docs<|\"|>,"
      "parameters:{properties:{limit:{type:<|\"|>INTEGER<|\"|>},query:{description:<|\"|>Search "
      "query<|\"|>,type:<|\"|>STRING<|\"|>}},required:[<|\"|>query<|\"|>],type:<|\"|>OBJECT<|\"|>}}"
      "<tool|><turn|>\n<|turn>user\nx<turn|>\n");
}

TEST(ChatTemplateTest, NestedSchemaMacros) {
  // enum (format_argument with quoted strings), array items with nested properties, nullable,
  // nested object with required, type lists, and the template's missing '}' when parameters has no
  // type.
  const char* tools = R"([{"type":"function","function":{"name":"f","parameters":{"properties":{
      "mode":{"type":"string","enum":["a","b"],"nullable":true},
      "xs":{"type":"array","items":{"type":"object","properties":{"n":{"type":"number"}},"required":["n"]}},
      "o":{"type":"object","properties":{"k":{"type":["string","null"]}},"required":["k"]}}}}}])";
  EXPECT_EQ(
      Render("[]", tools, false),
      "<bos><|turn>system\n<|tool>declaration:f{description:<|\"|><|\"|>,parameters:{properties:{"
      "mode:{enum:[<|\"|>a<|\"|>,<|\"|>b<|\"|>],nullable:true,type:<|\"|>STRING<|\"|>},"
      "o:{properties:{k:{type:[<|\"|>STRING<|\"|>,<|\"|>NULL<|\"|>]}},required:[<|\"|>k<|\"|>],"
      "type:<|\"|>OBJECT<|\"|>},"
      "xs:{items:{properties:{n:{type:<|\"|>NUMBER<|\"|>}},required:[<|\"|>n<|\"|>],"
      "type:<|\"|>OBJECT<|\"|>},type:<|\"|>ARRAY<|\"|>}},}<tool|><turn|>\n");
}

TEST(ChatTemplateTest, ToolCallResponseAndContinuedModelTurn) {
  const char* messages = R"([{"role":"user","content":"Find AX"},
      {"role":"assistant","tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"lookup","arguments":{"query":"AX","limit":2}}}]},
      {"role":"tool","tool_call_id":"c1","content":"AX Engine"},
      {"role":"assistant","content":"It is AX Engine."}])";
  EXPECT_EQ(Render(messages, "null", false),
            "<bos><|turn>user\nFind AX<turn|>\n<|turn>model\n<|tool_call>call:lookup{limit:2,"
            "query:<|\"|>AX<|\"|>}<tool_call|><|tool_response>response:lookup{value:<|\"|>AX "
            "Engine<|\"|>}<tool_response|>It is AX Engine.<turn|>\n");
}

TEST(ChatTemplateTest, PendingToolCallEndsWithToolResponseOpener) {
  const char* messages = R"([{"role":"user","content":"q"},
      {"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"b":true,"a":null,"x":1.0}}}]}])";
  EXPECT_EQ(Render(messages),
            "<bos><|turn>user\nq<turn|>\n<|turn>model\n<|tool_call>call:f{a:null,b:true,x:1.0}"
            "<tool_call|><|tool_response>");
}

TEST(ChatTemplateTest, ToolResultLastWithThinkingOpensThoughtChannel) {
  const char* messages = R"([{"role":"user","content":"q"},
      {"role":"assistant","tool_calls":[{"id":"1","function":{"name":"f","arguments":{}}}]},
      {"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"r"},{"type":"image"}]}])";
  EXPECT_EQ(Render(messages, "null", true, true),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nq<turn|>\n<|turn>model\n"
            "<|tool_call>call:f{}<tool_call|><|tool_response>response:f{value:<|\"|>r<|\"|>}"
            "<tool_response|><|image|><|channel>thought\n");
}

TEST(ChatTemplateTest, DictToolResponsesOnAssistantMessage) {
  const char* messages = R"([{"role":"user","content":"q"},
      {"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"k":"v"}}}],
       "tool_responses":[{"name":"f","response":{"temp":21.5,"ok":true,"tags":["a"],"nested":{"Z":1}}}]}])";
  EXPECT_EQ(
      Render(messages, "null", false),
      "<bos><|turn>user\nq<turn|>\n<|turn>model\n<|tool_call>call:f{k:<|\"|>v<|\"|>}<tool_call|>"
      "<|tool_response>response:f{nested:{Z:1},ok:true,tags:[<|\"|>a<|\"|>],temp:21.5}"
      "<tool_response|>");
}

TEST(ChatTemplateTest, ReasoningGateAndStripThinking) {
  const char* messages = R"([{"role":"user","content":"q1"},
      {"role":"assistant","reasoning":"old thought","content":"<|channel>thought\nx<channel|> A1 "},
      {"role":"user","content":"q2"},
      {"role":"assistant","reasoning_content":"new thought","content":"A2"}])";
  EXPECT_EQ(Render(messages, "null", false),
            "<bos><|turn>user\nq1<turn|>\n<|turn>model\nA1<turn|>\n<|turn>user\nq2<turn|>\n"
            "<|turn>model\n<|channel>thought\nnew thought\n<channel|>A2<turn|>\n");
}

TEST(ChatTemplateTest, PreserveThinkingKeepsToolCallReasoning) {
  const char* messages = R"([{"role":"user","content":"q1"},
      {"role":"assistant","reasoning":"R","tool_calls":[{"function":{"name":"f","arguments":null}}],
       "tool_responses":[{"response":"ok"}]},
      {"role":"user","content":"q2"}])";
  EXPECT_EQ(Render(messages, "null", false, false, true),
            "<bos><|turn>user\nq1<turn|>\n<|turn>model\n<|channel>thought\nR\n<channel|>"
            "<|tool_call>call:f{}<tool_call|><|tool_response>response:unknown{value:<|\"|>ok<|\"|>}"
            "<tool_response|><turn|>\n<|turn>user\nq2<turn|>\n");
  // Without preserve_thinking the earlier reasoning is dropped.
  EXPECT_EQ(Render(messages, "null", false).find("<|channel>"), std::string::npos);
}

TEST(ChatTemplateTest, UnorderedJsonOverloadAndOptions) {
  ChatTemplateOptions o;
  o.bos_token = "";
  o.add_generation_prompt = true;
  const nlohmann::json messages = nlohmann::json::parse(R"([{"role":"user","content":"Hi"}])");
  EXPECT_EQ(RenderChatTemplate(messages, nlohmann::json(), o),
            "<|turn>user\nHi<turn|>\n<|turn>model\n");
}

TEST(ChatTemplateTest, ToolMessageNameResolution) {
  // No id match: the tool message's name; empty name: "unknown"; a number result renders bare.
  const char* messages = R"([{"role":"user","content":"q"},
      {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{}}}]},
      {"role":"tool","tool_call_id":"zz","name":"g","content":7},
      {"role":"tool","tool_call_id":"zz","name":"","content":null},
      {"role":"tool","tool_call_id":"a","name":"ignored","content":"s"}])";
  EXPECT_EQ(Render(messages, "null", false),
            "<bos><|turn>user\nq<turn|>\n<|turn>model\n<|tool_call>call:f{}<tool_call|>"
            "<|tool_response>response:g{value:7}<tool_response|>"
            "<|tool_response>response:unknown{value:null}<tool_response|>"
            "<|tool_response>response:f{value:<|\"|>s<|\"|>}<tool_response|>");
}

TEST(ChatTemplateTest, DeserializeToolCallArgumentsParsesOpenAiStrings) {
  const Json messages = Json::parse(R"([{"role":"user","content":"q"},
      {"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"b\": [1, 2.5], \"a\": \"x\"}"}}]}])");
  const Json fixed = DeserializeToolCallArguments(messages);
  EXPECT_EQ(fixed[1]["tool_calls"][0]["function"]["arguments"],
            Json::parse(R"({"b":[1,2.5],"a":"x"})"));
  EXPECT_EQ(fixed[0], messages[0]);
  ChatTemplateOptions o;
  EXPECT_EQ(
      RenderChatTemplate(fixed, Json(), o),
      "<bos><|turn>user\nq<turn|>\n<|turn>model\n<|tool_call>call:f{a:<|\"|>x<|\"|>,b:[1,2.5]}"
      "<tool_call|><|tool_response>");
  try {
    DeserializeToolCallArguments(Json::parse(
        R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}])"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTemplate);
    EXPECT_NE(std::string(e.what()).find("messages[0].tool_calls[0].function.arguments"),
              std::string::npos);
  }
}

TEST(ChatTemplateErrorTest, UnknownRole) {
  ExpectTemplateError(R"([{"role":"narrator","content":"x"}])", "null", "messages[0].role");
  ExpectTemplateError(R"([{"content":"x"}])", "null", "messages[0].role");
}

TEST(ChatTemplateErrorTest, ToolResponseWithoutPrecedingCall) {
  ExpectTemplateError(R"([{"role":"user","content":"x"},{"role":"tool","content":"r"}])", "null",
                      "messages[1]");
  ExpectTemplateError(
      R"([{"role":"user","content":"x"},{"role":"assistant","content":"a"},{"role":"tool","content":"r"}])",
      "null", "messages[2]");
}

TEST(ChatTemplateErrorTest, MalformedToolSchema) {
  ExpectTemplateError(R"([{"role":"user","content":"x"}])",
                      R"([{"type":"function","function":{"description":"no name"}}])",
                      "tools[0].function.name");
  ExpectTemplateError(R"([{"role":"user","content":"x"}])", R"([{"name":"f"}])",
                      "tools[0].function");
  ExpectTemplateError(R"([{"role":"user","content":"x"}])",
                      R"([{"type":"function","function":{"name":"f","parameters":"p"}}])",
                      "tools[0].function.parameters");
  ExpectTemplateError(R"([{"role":"user","content":"x"}])",
                      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
                          "properties":{"p":{"type":null}}}}}])",
                      "tools[0].function.parameters.properties.p.type");
  ExpectTemplateError(
      R"([{"role":"user","content":"x"}])",
      R"([{"type":"function","function":{"name":"f","parameters":{"properties":[1]}}}])",
      "tools[0].function.parameters.properties");
}

TEST(ChatTemplateErrorTest, WrongContentTypes) {
  ExpectTemplateError(R"([{"role":"user","content":42}])", "null", "messages[0].content");
  ExpectTemplateError(R"([{"role":"user","content":{"text":"x"}}])", "null", "messages[0].content");
  ExpectTemplateError(R"([{"role":"user","content":[{"type":"text","text":1}]}])", "null",
                      "messages[0].content[0].text");
  ExpectTemplateError(R"([{"role":"user","content":["just a string"]}])", "null",
                      "messages[0].content[0]");
  ExpectTemplateError(R"([{"role":"user","content":[{"type":"file"}]}])", "null",
                      "messages[0].content[0].type");
  ExpectTemplateError(R"([{"role":"assistant","content":"a","reasoning":7}])", "null",
                      "messages[0].reasoning");
  ExpectTemplateError(R"({"role":"user"})", "null", "messages");
}

TEST(ChatTemplateErrorTest, StringToolCallArgumentsRaiseLikeTheTemplate) {
  ExpectTemplateError(
      R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}])",
      "null", "Deserialize arguments");
  ExpectTemplateError(R"([{"role":"assistant","tool_calls":[{"function":{"name":"f"}}]}])", "null",
                      "messages[0].tool_calls[0].function.arguments");
}

}  // namespace
}  // namespace gemma::chat
