#include "chat/py_value.h"

#include <gtest/gtest.h>

#include "gemma/error.h"

namespace gemma::chat {
namespace {

TEST(PyValueTest, FloatReprMatchesPython) {
  // Expected strings are what CPython's repr() prints.
  EXPECT_EQ(PyFloatRepr(1.0), "1.0");
  EXPECT_EQ(PyFloatRepr(-2.5), "-2.5");
  EXPECT_EQ(PyFloatRepr(0.1), "0.1");
  EXPECT_EQ(PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PyFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PyFloatRepr(1.5e300), "1.5e+300");
  EXPECT_EQ(PyFloatRepr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PyFloatRepr(3.14159), "3.14159");
  EXPECT_EQ(PyFloatRepr(100.0), "100.0");
}

TEST(PyValueTest, StrMatchesPython) {
  EXPECT_EQ(PyStr(Json(true)), "True");
  EXPECT_EQ(PyStr(Json(false)), "False");
  EXPECT_EQ(PyStr(Json(nullptr)), "None");
  EXPECT_EQ(PyStr(Json(42)), "42");
  EXPECT_EQ(PyStr(Json(-7)), "-7");
  EXPECT_EQ(PyStr(Json(2.0)), "2.0");
  EXPECT_EQ(PyStr(nullptr), "");  // Jinja Undefined prints as empty
  EXPECT_EQ(PyStr(Json::parse(R"([1, "a", "b'c", null, 1.5, {"k": true}])")),
            R"([1, 'a', "b'c", None, 1.5, {'k': True}])");
  // Python: repr(['\xa0x\u2028\u00e9\U0001F600\xad', 'a\nb\\']) (non-printables escaped)
  EXPECT_EQ(PyStr(Json::array({"\xc2\xa0x\xe2\x80\xa8\xc3\xa9\xf0\x9f\x98\x80\xc2\xad", "a\nb\\"})),
            "['\\xa0x\\u2028\xc3\xa9\xf0\x9f\x98\x80\\xad', 'a\\nb\\\\']");
}

TEST(PyValueTest, TruthinessMatchesPython) {
  EXPECT_FALSE(PyTruthy(nullptr));
  EXPECT_FALSE(PyTruthy(Json(nullptr)));
  EXPECT_FALSE(PyTruthy(Json("")));
  EXPECT_FALSE(PyTruthy(Json(0)));
  EXPECT_FALSE(PyTruthy(Json(0.0)));
  EXPECT_FALSE(PyTruthy(Json::array()));
  EXPECT_FALSE(PyTruthy(Json::object()));
  EXPECT_TRUE(PyTruthy(Json(" ")));
  EXPECT_TRUE(PyTruthy(Json(-1)));
  EXPECT_TRUE(PyTruthy(Json::parse("[0]")));
}

TEST(PyValueTest, StripIsPythonStrip) {
  EXPECT_EQ(PyStrip("  a b \n\t"), "a b");
  EXPECT_EQ(PyStrip("\x1c\x1fx\x0b\x0c"), "x");
  EXPECT_EQ(PyStrip("\xc2\xa0x\xe3\x80\x80"), "x");      // NBSP, ideographic space
  EXPECT_EQ(PyStrip("\xe2\x80\x8bx"), "\xe2\x80\x8bx");  // zero-width space is not whitespace
  EXPECT_EQ(PyStrip(""), "");
  EXPECT_EQ(PyStrip(" \n "), "");
}

TEST(PyValueTest, DictSortIsCaseInsensitiveAndStable) {
  const Json obj = Json::parse(R"({"b":1,"a":3,"A":2,"_":4,"B2":5})");
  std::vector<std::string> keys;
  for (const auto& [k, v] : DictSort(obj)) keys.push_back(k);
  // Python: sorted(items, key=lambda kv: kv[0].lower()) -> '_' (0x5f) < 'a' == 'A' (stable) < 'b' <
  // 'b2'
  EXPECT_EQ(keys, (std::vector<std::string>{"_", "a", "A", "b", "B2"}));
}

TEST(PyValueTest, CaseMappingFollowsPython) {
  // Python: "Straße Été ΣΟΦΊΑ Яблоко İ".lower() / .upper()
  EXPECT_EQ(PyLower("Stra\xc3\x9f"
                    "e \xc3\x89t\xc3\xa9 \xce\xa3\xce\x9f\xce\xa6\xce\x8a\xce\x91 "
                    "\xd0\xaf\xd0\xb1\xd0\xbb\xd0\xbe\xd0\xba\xd0\xbe \xc4\xb0"),
            "stra\xc3\x9f"
            "e \xc3\xa9t\xc3\xa9 \xcf\x83\xce\xbf\xcf\x86\xce\xaf\xce\xb1 "
            "\xd1\x8f\xd0\xb1\xd0\xbb\xd0\xbe\xd0\xba\xd0\xbe i\xcc\x87");
  EXPECT_EQ(PyUpper("stra\xc3\x9f"
                    "e \xc3\xa9t\xc3\xa9 \xcf\x83\xce\xbf\xcf\x86\xce\xaf\xce\xb1\xcf\x82"),
            "STRASSE \xc3\x89T\xc3\x89 \xce\xa3\xce\x9f\xce\xa6\xce\x8a\xce\x91\xce\xa3");
  EXPECT_EQ(PyUpper("string"), "STRING");
}

TEST(PyValueTest, IterateFollowsJinja) {
  EXPECT_EQ(PyIterate(nullptr, "x").size(), 0u);
  const Json obj = Json::parse(R"({"x":1,"y":2})");
  EXPECT_EQ(PyIterate(&obj, "x"), (std::vector<Json>{"x", "y"}));
  const Json s("h\xc3\xa9");
  EXPECT_EQ(PyIterate(&s, "x"), (std::vector<Json>{"h", "\xc3\xa9"}));
  const Json none(nullptr);
  try {
    PyIterate(&none, "tools[0].type");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTemplate);
    EXPECT_NE(std::string(e.what()).find("tools[0].type"), std::string::npos);
  }
}

TEST(PyValueTest, EqualsFollowsPython) {
  const Json one(1), one_f(1.0), t(true), s("1"), none(nullptr);
  EXPECT_TRUE(PyEquals(&one, &one_f));
  EXPECT_TRUE(PyEquals(&one, &t));
  EXPECT_FALSE(PyEquals(&one, &s));
  EXPECT_TRUE(PyEquals(&none, &none));
}

}  // namespace
}  // namespace gemma::chat
