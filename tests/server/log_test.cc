// clashd's log lines: text a client sent (ids, names, paths quoted in error messages) can
// neither forge fields or lines nor make a line longer than one atomic pipe write.
#include "log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace clash::server {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(LogTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(LogText("plain text, UTF-8: \xc3\xa9"), "plain text, UTF-8: \xc3\xa9");
  EXPECT_EQ(LogText("a\nb\rc\x1b[2Jd\x7f\te"), "a\\x0ab\\x0dc\\x1b[2Jd\\x7f\\x09e");
  EXPECT_EQ(LogText(std::string("x\0y", 3)), "x\\x00y");
}

TEST(LogTest, QuotedFieldsCannotEndEarly) {
  // A value that tries to close its quote and add a field of its own.
  EXPECT_EQ(LogQuote("x\" code=OK ms=0.1"), "\"x\\\" code=OK ms=0.1\"");
  EXPECT_EQ(LogQuote("a\\"), "\"a\\\\\"");
  // Cut at the limit, on a character boundary, with a note of what was left out.
  EXPECT_EQ(LogQuote("abcdef", 4), "\"abcd\"...[2 more bytes]");
  EXPECT_EQ(LogQuote("ab\xc3\xa9", 3), "\"ab\"...[2 more bytes]");
  EXPECT_EQ(LogQuote("ab\xc3\xa9", 4), "\"ab\xc3\xa9\"");
}

TEST(LogTest, LongMessagesAreCutToOnePipeWrite) {
  for (const std::string& message :
       {std::string(8 << 20, 'x'), std::string(5000, '\n'), std::string(5000, 'x') + "\xc3\xa9"}) {
    const std::string line = LogText(message);
    EXPECT_LE(line.size(), kMaxLogMessageBytes);
    EXPECT_THAT(line, HasSubstr(" more bytes]"));
    EXPECT_THAT(line, Not(HasSubstr("\n")));
  }
  // A cut never splits a UTF-8 character: 3000 two-byte characters.
  std::string accents;
  for (int i = 0; i < 3000; ++i) accents += "\xc3\xa9";
  const std::string cut = LogText(accents);
  const std::size_t kept = cut.find("...[");
  ASSERT_NE(kept, std::string::npos);
  EXPECT_EQ(kept % 2, 0u);
  EXPECT_THAT(cut, EndsWith(std::to_string(accents.size() - kept) + " more bytes]"));
  // Invalid UTF-8 at the cut (a continuation byte right after a control character, where the
  // cut falls): the escape before it stays whole. (LogText cuts where the escaped text passes
  // kMaxLogMessageBytes - 32.)
  const std::string odd = std::string(kMaxLogMessageBytes - 32 - 4, 'x') + "\n\x80" + "yyyy";
  EXPECT_THAT(LogText(odd), EndsWith("x\\x0a...[5 more bytes]"));
  // A message that fits is not cut.
  const std::string fits(kMaxLogMessageBytes - 100, 'y');
  EXPECT_EQ(LogText(fits), fits);
}

}  // namespace
}  // namespace clash::server
