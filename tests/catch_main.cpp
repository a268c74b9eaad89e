// catch_main.cpp: Catch2's main for every CPU test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
