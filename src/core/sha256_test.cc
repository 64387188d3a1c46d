#include "core/sha256.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>
#include <string>
#include <vector>

namespace gemma {
namespace {

// FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA256_2.pdf") and the empty message.
TEST(Sha256, NistVectors) {
  EXPECT_EQ(Sha256::Hex(Sha256::Of("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256::Hex(Sha256::Of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256::Hex(Sha256::Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256::Hex(Sha256::Of(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every length around the block and padding boundaries, fed in random pieces, against OpenSSL.
TEST(Sha256, MatchesOpenSslInPieces) {
  std::mt19937 rng(7);
  for (size_t len = 0; len < 300; ++len) {
    std::vector<uint8_t> data(len);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    unsigned char want[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    ASSERT_EQ(EVP_Digest(data.data(), data.size(), want, &n, EVP_sha256(), nullptr), 1);
    Sha256 s;
    size_t at = 0;
    while (at < len) {
      const size_t take = std::min<size_t>(len - at, rng() % 80);
      s.Update(data.data() + at, take);
      at += take;
    }
    const Sha256::Digest got = s.Final();
    ASSERT_EQ(std::vector<uint8_t>(got.begin(), got.end()), std::vector<uint8_t>(want, want + n))
        << "length " << len;
  }
}

}  // namespace
}  // namespace gemma
