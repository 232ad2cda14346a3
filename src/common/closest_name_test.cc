#include "common/closest_name.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(ClosestNameTest, TyposAndAbbreviations) {
  std::vector<std::string> names{"learning_rate", "weight_decay", "epochs", "batch_size"};
  EXPECT_EQ(ClosestName("epohcs", names), "epochs");          // transposition
  EXPECT_EQ(ClosestName("Batch-Size", names), "batch_size");  // case and dash folded
  EXPECT_EQ(ClosestName("lr", names), "learning_rate");       // abbreviation
  EXPECT_EQ(ClosestName("momentum", names), "");              // nothing close
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

}  // namespace
}  // namespace cohort
