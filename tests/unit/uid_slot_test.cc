// Host uid slots (jail/userns.h): claimed with flock on lock files, from a random slot
// on, so a claim does not probe every live sandbox's slot first.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "jail/userns.h"

namespace cela::jail {
namespace {

class UidSlots : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cela-uid-slots-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(UidSlots, ClaimsStartAtARandomSlotNotTheLowestFree) {
  std::vector<UidSlot> held;
  std::set<uint32_t> indices;
  for (int i = 0; i < 16; ++i) {
    auto slot = UidSlot::acquire(dir_, kMaxSlots);
    ASSERT_TRUE(slot) << slot.error().message();
    indices.insert(slot->index());
    held.push_back(std::move(*slot));
  }
  EXPECT_EQ(indices.size(), 16u);
  // Lowest-free claiming would have taken exactly 0..15 (odds of that at random: nil).
  EXPECT_NE(*indices.rbegin(), 15u) << "slots were claimed lowest first";
}

TEST_F(UidSlots, EveryFreeSlotIsFoundAndAFullSetIsALimit) {
  constexpr uint32_t kSlots = 8;
  std::vector<UidSlot> held;
  std::set<uint32_t> indices;
  for (uint32_t i = 0; i < kSlots; ++i) {
    auto slot = UidSlot::acquire(dir_, kSlots);
    ASSERT_TRUE(slot) << "claim " << i << ": " << slot.error().message();
    EXPECT_LT(slot->index(), kSlots);
    indices.insert(slot->index());
    held.push_back(std::move(*slot));
  }
  EXPECT_EQ(indices.size(), kSlots);
  auto full = UidSlot::acquire(dir_, kSlots);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::limit);
  // A released slot is the one a claim finds, wherever it starts.
  const uint32_t freed = held[3].index();
  held.erase(held.begin() + 3);
  auto again = UidSlot::acquire(dir_, kSlots);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->index(), freed);
}

TEST_F(UidSlots, TheLastSlotStaysInsideTheHostUidSpace) {
  auto last = UidSlot::try_acquire(kMaxSlots - 1, dir_);
  ASSERT_TRUE(last && *last);
  const uint64_t top = uint64_t{(*last)->host_base()} + kIdsPerSlot - 1;
  EXPECT_LT(top, 0xFFFFFFFEull);  // (uid_t)-1 and -2 are special
  EXPECT_FALSE(UidSlot::try_acquire(kMaxSlots, dir_));
}

}  // namespace
}  // namespace cela::jail
