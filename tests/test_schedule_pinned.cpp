// Generated schedules pinned as text: a change to a generator, or to the skeleton they share
// (Note [1F1B skeleton] in schedule/generators.cpp), that moves a single action fails here, both grids printed.
#include <doctest/doctest.h>

#include "schedule/schedule.hpp"

using namespace ap;

TEST_CASE("generated schedules are pinned as text: GPipe, 1F1B, interleaved 1F1B, ZB-H1") {
  CHECK(to_grid(make_gpipe(3, 4)) ==
        "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3\n"
        "1F0 1F1 1F2 1F3 1B0 1B1 1B2 1B3\n"
        "2F0 2F1 2F2 2F3 2B0 2B1 2B2 2B3\n");
  CHECK(to_grid(make_1f1b(4, 8)) ==
        "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7\n"
        "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7\n"
        "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7\n"
        "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7\n");
  CHECK(to_grid(make_1f1b(4, 2)) ==
        "0F0 0F1 0B0 0B1\n"
        "1F0 1F1 1B0 1B1\n"
        "2F0 2F1 2B0 2B1\n"
        "3F0 3B0 3F1 3B1\n");
  CHECK(to_grid(make_interleaved_1f1b(2, 4, 2)) ==
        "0F0 0F1 2F0 2F1 2B0 0F2 2B1 0F3 0B0 2F2 0B1 2F3 2B2 2B3 0B2 0B3\n"
        "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3\n");
  CHECK(to_grid(make_interleaved_1f1b(3, 3, 3)) ==
        "0F0 0F1 0F2 3F0 3F1 3F2 6F0 6F1 6F2 6B0 6B1 6B2 3B0 3B1 3B2 0B0 0B1 0B2\n"
        "1F0 1F1 1F2 4F0 4F1 4F2 7F0 7F1 7B0 7F2 7B1 7B2 4B0 4B1 4B2 1B0 1B1 1B2\n"
        "2F0 2F1 2F2 5F0 5F1 5F2 8F0 8B0 8F1 8B1 8F2 8B2 5B0 5B1 5B2 2B0 2B1 2B2\n");
  CHECK(to_grid(make_zb_h1(4, 6)) ==
        "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0I3 0W3 0I4 0W4 0I5 0W5\n"
        "1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1I4 1W3 1I5 1W4 1W5\n"
        "2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2I5 2W3 2W4 2W5\n"
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3W3 3W4 3W5\n");
  CHECK(to_grid(make_zb_h1(4, 2)) ==
        "0F0 0F1 0I0 0W0 0I1 0W1\n"
        "1F0 1F1 1I0 1I1 1W0 1W1\n"
        "2F0 2F1 2I0 2I1 2W0 2W1\n"
        "3F0 3I0 3F1 3I1 3W0 3W1\n");
}
