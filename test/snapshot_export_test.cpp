// SPDX-License-Identifier: Apache-2.0
// The snapshot exports' text: names that are not valid UTF-8 (a resource's,
// an annotation's) come out with each ill-formed sequence replaced by U+FFFD,
// as Python's "replace" decoding does, in the JSON, the pickle and the
// Chrome trace alike, so that every reader of them loads the file.
#include <cudapmr/detail/call_stack.hpp>
#include <cudapmr/snapshot_export.hpp>

#include <dlfcn.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cudapmr::test {
namespace {

/// Whether `text` is well-formed UTF-8: each sequence is decoded to its code
/// point, which must need that many bytes (no overlong form), lie in Unicode's
/// range and not be a surrogate.
bool is_valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const auto lead = static_cast<unsigned char>(text[at]);
    std::size_t length = 0;
    std::uint32_t code_point = 0;
    if (lead < 0x80) length = 1, code_point = lead;
    else if ((lead & 0xe0) == 0xc0) length = 2, code_point = lead & 0x1fu;
    else if ((lead & 0xf0) == 0xe0) length = 3, code_point = lead & 0x0fu;
    else if ((lead & 0xf8) == 0xf0) length = 4, code_point = lead & 0x07u;
    else return false;
    if (at + length > text.size()) return false;
    for (std::size_t i = 1; i < length; ++i) {
      const auto continuation = static_cast<unsigned char>(text[at + i]);
      if ((continuation & 0xc0) != 0x80) return false;
      code_point = (code_point << 6) | (continuation & 0x3fu);
    }
    constexpr std::uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < smallest[length] || code_point > 0x10ffff) return false;
    if (code_point >= 0xd800 && code_point <= 0xdfff) return false;
    at += length;
  }
  return true;
}

const std::string replacement = "\xef\xbf\xbd";  // U+FFFD

std::string replaced(int times) {
  std::string text;
  for (int i = 0; i < times; ++i) text += replacement;
  return text;
}

/// A name as given, and as the exports must write it.
struct name_case {
  std::string given;
  std::string written;
};

/// What Python's `bytes.decode("utf-8", "replace")` gives: one U+FFFD for
/// each maximal prefix of a well-formed sequence, else for each byte.
std::vector<name_case> name_cases() {
  return {
      {"plain ascii", "plain ascii"},
      {"\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},  // two, three, four bytes
      {"\xc0\xaf", replaced(2)},                                                    // an overlong '/'
      {"\xe0\x80\xaf", replaced(3)},                                                // an overlong '/' in three bytes
      {"\xed\xa0\x80", replaced(3)},                                                // a surrogate, U+D800
      {"\xf4\x90\x80\x80", replaced(4)},                                            // past U+10FFFF
      {"\xf8\x88\x80\x80\x80", replaced(5)},                                        // a five-byte form
      {"\x80", replaced(1)},                                                        // a lone continuation byte
      {"\xff", replaced(1)},
      {"\xe2\x82", replaced(1)},                                                    // cut off at the end
      {"\xe2\x82x", replaced(1) + "x"},                                             // cut off by ASCII
      {"\xf0\x9f\x98", replaced(1)},
      {"\xe1\x80\xe2\xf0\x91\x92\xf1\xbf" "A", replaced(4) + "A"},
  };
}

/// A snapshot of one host resource named `name`, with an annotated region of that name.
memory_snapshot snapshot_named(const std::string& name) {
  memory_snapshot taken;
  taken.time_ns = 1000;
  resource_state state;
  state.name = name;
  taken.resources.push_back(state);
  taken.annotations.push_back({name, annotation_stage::begin, 1000, 1});
  taken.annotations.push_back({name, annotation_stage::end, 2000, 1});
  return taken;
}

/// `text` as pickle's BINUNICODE opcode writes it: 'X', its length in four little-endian bytes, the bytes.
std::string pickled(const std::string& text) {
  std::string opcode = "X";
  for (int i = 0; i < 4; ++i) opcode += static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return opcode + text;
}

TEST(SnapshotExport, JsonReplacesEachIllFormedSequenceOfANameWithTheReplacementCharacter) {
  for (const name_case& name : name_cases()) {
    const std::string json = to_json(snapshot_named("<" + name.given + ">"));
    EXPECT_TRUE(is_valid_utf8(json)) << "for the name \"" << name.given << "\"";
    EXPECT_NE(json.find("\"name\":\"<" + name.written + ">\""), std::string::npos) << json;
  }
}

TEST(SnapshotExport, ChromeTraceReplacesEachIllFormedSequenceOfANameWithTheReplacementCharacter) {
  for (const name_case& name : name_cases()) {
    const std::string trace = to_chrome_trace(snapshot_named("<" + name.given + ">"));
    EXPECT_TRUE(is_valid_utf8(trace)) << "for the name \"" << name.given << "\"";
    EXPECT_NE(trace.find("\"name\":\"<" + name.written + "> (stack 1)\""), std::string::npos) << trace;
    EXPECT_NE(trace.find("\"name\":\"<" + name.written + ">\",\"ph\":\"B\""), std::string::npos) << trace;
  }
}

TEST(SnapshotExport, PickleStringsAreValidUtf8WithTheLengthOfTheirBytes) {
  for (const name_case& name : name_cases()) {
    const std::string pickle = to_pytorch_pickle(snapshot_named("<" + name.given + ">"));
    EXPECT_NE(pickle.find(pickled("<" + name.written + ">")), std::string::npos)
        << "the annotation's name, for \"" << name.given << "\"";
    if (name.given != name.written) {
      EXPECT_EQ(pickle.find("<" + name.given + ">"), std::string::npos) << "the name as given, ill-formed";
    }
  }
}

TEST(SnapshotExport, JsonStillEscapesQuotesBackslashesAndControlCharacters) {
  const std::string json = to_json(snapshot_named(std::string("a\"b\\c\nd\x01") + "\xc3\xa9"));
  EXPECT_TRUE(is_valid_utf8(json));
  EXPECT_NE(json.find(R"("name":"a\"b\\c\nd\u0001)" "\xc3\xa9\""), std::string::npos) << json;
}

TEST(SnapshotExport, AFrameIsNamedByItsFunctionDemangledWithItsOffset) {
  // PyTorch's viewer shows a frame's name as it is: glibc's "(_ZSt9terminatev+0x4) [0x7f...]" was unreadable.
  void* terminate = dlsym(RTLD_DEFAULT, "_ZSt9terminatev");
  ASSERT_NE(terminate, nullptr) << "libstdc++ exports std::terminate";
  const detail::frame_name named = detail::name_frame(static_cast<char*>(terminate) + 4);  // a return address in it
  EXPECT_EQ(named.function, "std::terminate()+0x4");
  EXPECT_NE(named.binary.find("libstdc++"), std::string::npos) << named.binary;
  // This binary exports none of its own functions (no -rdynamic): the address stands in.
  static int here = 0;
  const detail::frame_name unnamed = detail::name_frame(&here);
  EXPECT_EQ(unnamed.function, fmt::format("{}", static_cast<void*>(&here))) << unnamed.binary;
}

TEST(SnapshotExport, AFrameIsReadFromTheRightOfGlibcsText) {
  void* const frame = reinterpret_cast<void*>(std::uintptr_t{0x7f0012345678});
  const std::string address = fmt::format("{}", frame);
  const auto named = [&](std::string_view symbol) { return detail::name_frame(symbol, frame); };
  // A binary whose path holds parentheses.
  EXPECT_EQ(named("/opt/app (copy)/libf.so(_ZN3app4stepEv+0x1c) [0x7f0012345678]").binary, "/opt/app (copy)/libf.so");
  EXPECT_EQ(named("/opt/app (copy)/libf.so(_ZN3app4stepEv+0x1c) [0x7f0012345678]").function, "app::step()+0x1c");
  // A C function is no mangled type: "f" stays "f", not "float".
  EXPECT_EQ(named("/lib/libc.so.6(f+0x3) [0x7f0012345678]").function, "f+0x3");
  EXPECT_EQ(named("/lib/libc.so.6(d-0x10) [0x7f0012345678]").function, "d-0x10");
  // No function, or no binary: the address.
  EXPECT_EQ(named("./app(+0x607477) [0x7f0012345678]").function, address);
  EXPECT_EQ(named("./app(+0x607477) [0x7f0012345678]").binary, "./app");
  EXPECT_EQ(named("[0x7f0012345678]").function, address);
  EXPECT_EQ(named("[0x7f0012345678]").binary, "??");
}

}  // namespace
}  // namespace cudapmr::test
