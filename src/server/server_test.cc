#include <gtest/gtest.h>
TEST(Server, Placeholder) {}
