#include "cc/store/internal/wire.h"

#include "gtest/gtest.h"

namespace distkit {
namespace store_wire {
namespace {

std::string Body(const Request& r) {
  std::string frame;
  EncodeRequest(r, &frame);
  EXPECT_EQ(FrameLength(frame.data()), frame.size() - kHeaderBytes);
  return frame.substr(kHeaderBytes);
}

Request Make(Op op, std::vector<std::string> keys,
             std::vector<std::string> values, int64_t number = 0) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return r;
}

TEST(WireTest, EveryOpRoundTrips) {
  const std::string binary("a\0b\xff", 4);
  std::vector<Request> requests = {
      Make(Op::kSet, {"k"}, {binary}),
      Make(Op::kAdd, {"n"}, {}, -7),
      Make(Op::kCompareSet, {"k"}, {"", binary}),
      Make(Op::kWait, {"a", "b", ""}, {}, 1500),
      Make(Op::kCheck, {"a"}, {}),
      Make(Op::kDeleteKey, {"k"}, {}),
      Make(Op::kNumKeys, {}, {}),
      Make(Op::kMultiGet, {"x", "y"}, {}, 0),
      Make(Op::kMultiSet, {"x", "y"}, {"1", binary}),
      Make(Op::kAppend, {"k"}, {"tail"}),
  };
  requests[3].try_only = true;
  Request hello = Make(Op::kHello, {}, {std::string(32, '\x07')});
  hello.magic = kMagic;
  requests.push_back(hello);
  requests.push_back(Make(Op::kProof, {}, {std::string(32, '\xfe')}));
  for (const Request& r : requests) {
    absl::StatusOr<Request> d = DecodeRequest(Body(r));
    ASSERT_TRUE(d.ok()) << OpName(r.op) << ": " << d.status();
    EXPECT_EQ(d->op, r.op);
    EXPECT_EQ(d->keys, r.keys) << OpName(r.op);
    EXPECT_EQ(d->values, r.values) << OpName(r.op);
    EXPECT_EQ(d->number, r.number) << OpName(r.op);
    EXPECT_EQ(d->try_only, r.try_only) << OpName(r.op);
    EXPECT_EQ(d->magic, r.magic) << OpName(r.op);
  }
}

TEST(WireTest, TruncatedTrailingAndUnknownAreRefused) {
  const std::string body = Body(Make(Op::kCompareSet, {"key"}, {"e", "d"}));
  for (size_t cut = 0; cut < body.size(); ++cut) {
    absl::StatusOr<Request> d = DecodeRequest(body.substr(0, cut));
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << cut;
  }
  absl::StatusOr<Request> trailing = DecodeRequest(body + "x");
  EXPECT_NE(trailing.status().message().find("trailing"),
            absl::string_view::npos)
      << trailing.status();
  EXPECT_FALSE(DecodeRequest(std::string(1, '\x00')).ok());
  EXPECT_FALSE(DecodeRequest(std::string(1, '\x63')).ok());
  EXPECT_FALSE(DecodeRequest(std::string(1, '\x0d')).ok());  // past kProof
}

TEST(WireTest, AHostileCountReservesNothing) {
  // A multi_get claiming 2^32-1 keys in a 9-byte body.
  std::string body;
  PutU8(&body, static_cast<uint8_t>(Op::kMultiGet));
  PutU32(&body, 0xffffffffu);
  PutU32(&body, 0);
  absl::StatusOr<Request> d = DecodeRequest(body);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, MultiSetNeedsAValuePerKey) {
  absl::StatusOr<Request> d =
      DecodeRequest(Body(Make(Op::kMultiSet, {"a", "b"}, {"1"})));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("2 keys and 1 values"),
            absl::string_view::npos)
      << d.status();
}

TEST(WireTest, ErrorsCarryCodeAndMessage) {
  std::string frame;
  EncodeError(absl::NotFoundError("store: gone"), &frame);
  ASSERT_EQ(FrameLength(frame.data()), frame.size() - kHeaderBytes);
  EXPECT_EQ(static_cast<absl::StatusCode>(frame[kHeaderBytes]),
            absl::StatusCode::kNotFound);
  Reader r(absl::string_view(frame).substr(kHeaderBytes + 1));
  EXPECT_EQ(r.String(), "store: gone");
  EXPECT_TRUE(r.done());
}

}  // namespace
}  // namespace store_wire
}  // namespace distkit
