// Expected values are written by hand from the tool-call syntax in gemma4-spec.md section 5.
#include "chat/output_parser.h"

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "gemma/error.h"

namespace gemma::chat {
namespace {

TEST(ToolArgumentsTest, Scalars) {
  EXPECT_EQ(ParseToolArguments("{limit:2,query:<|\"|>AX<|\"|>}"),
            Json::parse(R"({"limit":2,"query":"AX"})"));
  const Json j = ParseToolArguments("{a:-3,b:1.5,c:-2.5e-3,d:1E+2,e:true,f:false,g:null,h:0}");
  EXPECT_EQ(j["a"], Json(-3));
  EXPECT_TRUE(j["a"].is_number_integer());
  EXPECT_DOUBLE_EQ(j["b"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["c"].get<double>(), -0.0025);
  EXPECT_DOUBLE_EQ(j["d"].get<double>(), 100.0);
  EXPECT_TRUE(j["d"].is_number_float());
  EXPECT_EQ(j["e"], Json(true));
  EXPECT_EQ(j["f"], Json(false));
  EXPECT_TRUE(j["g"].is_null());
  EXPECT_EQ(j["h"], Json(0));
}

TEST(ToolArgumentsTest, StringsMayContainAnything) {
  const Json j = ParseToolArguments(
      "{code:<|\"|>if (a) { b(\"x\", 'y'); }\nkey: [1,2]<|\"|>,empty:<|\"|><|\"|>}");
  EXPECT_EQ(j["code"], Json("if (a) { b(\"x\", 'y'); }\nkey: [1,2]"));
  EXPECT_EQ(j["empty"], Json(""));
}

TEST(ToolArgumentsTest, NestedObjectsAndArrays) {
  EXPECT_EQ(ParseToolArguments("{filter:{tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>],range:{max:10,min:-1}},"
                               "matrix:[[1,2],[3.5]],objs:[{k:null},{}],none:[]}"),
            Json::parse(R"({"filter":{"tags":["a","b"],"range":{"max":10,"min":-1}},
                            "matrix":[[1,2],[3.5]],"objs":[{"k":null},{}],"none":[]})"));
  EXPECT_EQ(ParseToolArguments("{}"), Json::object());
}

TEST(ToolArgumentsTest, ToleratesWhitespaceAndQuotedKeys) {
  EXPECT_EQ(ParseToolArguments("{ a : 1 , <|\"|>b c<|\"|> : [ true , null ] }"),
            Json::parse(R"({"a":1,"b c":[true,null]})"));
}

TEST(ToolArgumentsTest, Malformed) {
  for (const char* bad :
       {"{a:}", "{a:1", "{a:bare}", "{a:<|\"|>open}", "{:1}", "{a:1,}", "{a:[1,2}", "{a:1}x",
        "{a:12abc}", "{a:-}", "{a:1.}", "[1]", "{a:True}"}) {
    EXPECT_THROW(ParseToolArguments(bad), Error) << bad;
  }
  try {
    ParseToolArguments("{a:1,b:?}");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("offset 7"), std::string::npos) << e.what();
  }
}

TEST(ParseModelOutputTest, ReasoningTextAndToolCall) {
  const ParsedOutput out = ParseModelOutput(
      "<|channel>thought\nLet me look it up.<channel|>Checking."
      "<|tool_call>call:lookup{limit:2,query:<|\"|>AX<|\"|>}<tool_call|>");
  EXPECT_EQ(out.reasoning, "Let me look it up.");
  EXPECT_EQ(out.text, "Checking.");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "lookup");
  EXPECT_EQ(out.tool_calls[0].arguments, Json::parse(R"({"limit":2,"query":"AX"})"));
  EXPECT_EQ(out.tool_calls[0].raw,
            "<|tool_call>call:lookup{limit:2,query:<|\"|>AX<|\"|>}<tool_call|>");
  EXPECT_TRUE(out.malformed.empty());
}

TEST(ParseModelOutputTest, PlainTextAndUnlabelledChannel) {
  EXPECT_EQ(ParseModelOutput("Hello <world> a<b").text, "Hello <world> a<b");
  const ParsedOutput out = ParseModelOutput("<|channel>raw<channel|>x");
  EXPECT_EQ(out.reasoning, "raw");
  EXPECT_EQ(out.text, "x");
}

TEST(ParseModelOutputTest, SeveralToolCalls) {
  const ParsedOutput out = ParseModelOutput(
      "<|tool_call>call:a{}<tool_call|><|tool_call>call:b{x:<|\"|>}<tool_call|><|\"|>}<tool_call|"
      ">");
  // The block ends at the first <tool_call|>, so the second call's string is cut: malformed.
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "a");
  EXPECT_EQ(out.tool_calls[0].arguments, Json::object());
  ASSERT_EQ(out.malformed.size(), 2u);
  EXPECT_EQ(out.malformed[0].raw, "<|tool_call>call:b{x:<|\"|>}<tool_call|>");
  EXPECT_EQ(out.malformed[1].raw, "<tool_call|>");  // the stray closer
  EXPECT_EQ(out.text, "<|\"|>}");
}

TEST(ParseModelOutputTest, MalformedBlocksAreReportedNotDropped) {
  ParsedOutput out = ParseModelOutput("a<|tool_call>call:f{x:bare}<tool_call|>b");
  EXPECT_EQ(out.text, "ab");
  EXPECT_TRUE(out.tool_calls.empty());
  ASSERT_EQ(out.malformed.size(), 1u);
  EXPECT_EQ(out.malformed[0].raw, "<|tool_call>call:f{x:bare}<tool_call|>");

  out = ParseModelOutput("<|tool_call>lookup{}<tool_call|>");
  ASSERT_EQ(out.malformed.size(), 1u);
  EXPECT_NE(out.malformed[0].reason.find("call:"), std::string::npos);

  out = ParseModelOutput("ok<|tool_call>call:f{a:1");
  EXPECT_EQ(out.text, "ok");
  ASSERT_EQ(out.malformed.size(), 1u);
  EXPECT_EQ(out.malformed[0].raw, "<|tool_call>call:f{a:1");

  out = ParseModelOutput("<|channel>thought\nhalf a thought");
  EXPECT_EQ(out.reasoning, "half a thought");
  ASSERT_EQ(out.malformed.size(), 1u);
  EXPECT_EQ(out.malformed[0].raw, "<|channel>thought\nhalf a thought");

  out = ParseModelOutput("end<turn|>");
  EXPECT_EQ(out.text, "end");
  ASSERT_EQ(out.malformed.size(), 1u);
  EXPECT_EQ(out.malformed[0].raw, "<turn|>");
}

TEST(ParseModelOutputTest, TemplateRenderedCallsRoundTrip) {
  // A call as the canonical template writes it (rendered by jinja2 from the args_types case):
  // parsing it and rendering the parsed call again must give the same bytes, so history re-renders
  // exactly.
  const std::string call =
      "<|tool_call>call:t{b:true,f:false,i:-12,l:[1,<|\"|>a<|\"|>,null,[true]],n:null,o:{alpha:[{k:"
      "1}],"
      "Key:{inner:<|\"|>v<|\"|>}},s:<|\"|>str \n<|\"|>,x:1.0,y:2.5e-07,z:1e+16}<tool_call|>";
  const ParsedOutput out = ParseModelOutput(call);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  ASSERT_TRUE(out.malformed.empty());
  Json messages = Json::array();
  messages.push_back(Json{{"role", "user"}, {"content", "q"}});
  Json function = {{"name", out.tool_calls[0].name}, {"arguments", out.tool_calls[0].arguments}};
  messages.push_back(
      Json{{"role", "assistant"}, {"tool_calls", Json::array({Json{{"function", function}}})}});
  const std::string rendered = RenderChatTemplate(messages, Json(), ChatTemplateOptions());
  EXPECT_EQ(rendered, "<bos><|turn>user\nq<turn|>\n<|turn>model\n" + call + "<|tool_response>");
}

// Collects stream events into one string per kind.
struct Collected {
  std::string text, reasoning;
  std::vector<ToolCall> calls;
  std::vector<MalformedBlock> malformed;
  void Add(const std::vector<StreamEvent>& events) {
    for (const auto& e : events) {
      if (e.kind == StreamEvent::Kind::kTextDelta) text += e.text;
      if (e.kind == StreamEvent::Kind::kReasoningDelta) reasoning += e.text;
      if (e.kind == StreamEvent::Kind::kToolCall) calls.push_back(e.tool_call);
      if (e.kind == StreamEvent::Kind::kMalformed) malformed.push_back(e.malformed);
    }
  }
};

TEST(StreamingParserTest, NeverLeaksPartialMarkers) {
  StreamingParser p;
  std::vector<StreamEvent> ev = p.Push("Hi <|tool");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, StreamEvent::Kind::kTextDelta);
  EXPECT_EQ(ev[0].text, "Hi ");
  ev = p.Push("_call>call:get{id:7}");
  EXPECT_TRUE(ev.empty());  // a call is reported whole
  ev = p.Push("<tool_ca");
  EXPECT_TRUE(ev.empty());
  ev = p.Push("ll|> done<");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, StreamEvent::Kind::kToolCall);
  EXPECT_EQ(ev[0].tool_call.name, "get");
  EXPECT_EQ(ev[0].tool_call.arguments, Json::parse(R"({"id":7})"));
  EXPECT_EQ(ev[1].kind, StreamEvent::Kind::kTextDelta);
  EXPECT_EQ(ev[1].text, " done");  // the trailing "<" is held back
  ev = p.Push("3");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "<3");
  EXPECT_TRUE(p.Finish().empty());
}

TEST(StreamingParserTest, HeldBackTextIsFlushedAtFinish) {
  StreamingParser p;
  Collected c;
  c.Add(p.Push("a <|chan"));
  EXPECT_EQ(c.text, "a ");
  c.Add(p.Finish());
  EXPECT_EQ(c.text, "a <|chan");
  EXPECT_TRUE(c.malformed.empty());
}

TEST(StreamingParserTest, ReasoningDeltasStreamAndLabelIsStripped) {
  StreamingParser p;
  Collected c;
  c.Add(p.Push("<|channel>tho"));
  EXPECT_EQ(c.reasoning, "");  // "tho" may be the start of the "thought\n" label
  c.Add(p.Push("ught\nStep 1. "));
  EXPECT_EQ(c.reasoning, "Step 1. ");
  c.Add(p.Push("Step 2.<chan"));
  EXPECT_EQ(c.reasoning, "Step 1. Step 2.");
  c.Add(p.Push("nel|>Answer"));
  c.Add(p.Finish());
  EXPECT_EQ(c.reasoning, "Step 1. Step 2.");
  EXPECT_EQ(c.text, "Answer");
  EXPECT_TRUE(c.malformed.empty());
}

TEST(StreamingParserTest, ByteByByteEqualsWholeParse) {
  const std::string raw =
      "<|channel>thought\nplan <b>{x}</b><channel|>Sure: <|tool_call>call:search{q:<|\"|>a, b: "
      "{c}<|\"|>,n:[1,-2.5e3,{deep:[null]}]}<tool_call|>tail <|tool_call>call:bad{x}<tool_call|>!";
  StreamingParser p;
  Collected c;
  for (char ch : raw) {
    const std::vector<StreamEvent> ev = p.Push(std::string(1, ch));
    for (const auto& e : ev) {
      if (e.kind == StreamEvent::Kind::kTextDelta) {
        EXPECT_EQ(e.text.find("<|"), std::string::npos) << e.text;
      }
    }
    c.Add(ev);
  }
  c.Add(p.Finish());
  EXPECT_EQ(c.reasoning, "plan <b>{x}</b>");
  EXPECT_EQ(c.text, "Sure: tail !");
  ASSERT_EQ(c.calls.size(), 1u);
  EXPECT_EQ(c.calls[0].name, "search");
  EXPECT_EQ(c.calls[0].arguments["q"], Json("a, b: {c}"));
  EXPECT_EQ(c.calls[0].arguments["n"][1].get<double>(), -2500.0);
  EXPECT_TRUE(c.calls[0].arguments["n"][2]["deep"][0].is_null());
  ASSERT_EQ(c.malformed.size(), 1u);
  EXPECT_EQ(c.malformed[0].raw, "<|tool_call>call:bad{x}<tool_call|>");
}

TEST(StreamingParserTest, EveryTwoAndThreeWaySplitGivesTheSameResult) {
  const std::string raw =
      "<|channel>thought\nA<b<channel|>T1<|tool_call>call:f{s:<|\"|>x}y<|\"|>,n:-1}<tool_call|>T2<"
      "turn|>";
  for (size_t i = 0; i <= raw.size(); ++i) {
    for (size_t j = i; j <= raw.size(); j += 3) {
      StreamingParser p;
      Collected c;
      c.Add(p.Push(raw.substr(0, i)));
      c.Add(p.Push(raw.substr(i, j - i)));
      c.Add(p.Push(raw.substr(j)));
      c.Add(p.Finish());
      SCOPED_TRACE(std::to_string(i) + "," + std::to_string(j));
      EXPECT_EQ(c.reasoning, "A<b");
      EXPECT_EQ(c.text, "T1T2");
      ASSERT_EQ(c.calls.size(), 1u);
      EXPECT_EQ(c.calls[0].arguments, Json::parse(R"({"s":"x}y","n":-1})"));
      ASSERT_EQ(c.malformed.size(), 1u);
      EXPECT_EQ(c.malformed[0].raw, "<turn|>");
    }
  }
}

}  // namespace
}  // namespace gemma::chat
