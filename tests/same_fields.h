// same_fields.h: two records equal member by member. check_same_fields(a, b, &T::x, &T::y, ...) CHECKs a.x == b.x,
// a.y == b.y, ...; require_same_fields REQUIREs them (the case stops at the first difference). A failure names the
// member's place in the list.
#pragma once
#include <catch2/catch.hpp>

namespace oscar::test {

template <bool Require, class T, class... M>
void same_fields(const T& a, const T& b, M T::*... members) {
  int place = 0;
  const auto one = [&](auto m) {
    INFO("member " << place << " of the list");
    if constexpr (Require) REQUIRE(a.*m == b.*m);
    else CHECK(a.*m == b.*m);
    ++place;
  };
  (one(members), ...);
}

template <class T, class... M>
void check_same_fields(const T& a, const T& b, M T::*... members) {
  same_fields<false>(a, b, members...);
}

template <class T, class... M>
void require_same_fields(const T& a, const T& b, M T::*... members) {
  same_fields<true>(a, b, members...);
}

}  // namespace oscar::test
