# Offline build: cohort's dependencies other than libtorch and Threads come from a bundle made
# by scripts/deps-bundle (COHORT_DEPS_BUNDLE), not from find_package. The targets carry the
# names find_package would give, so the rest of the build does not know the difference. The
# bundle's include directory comes first on the include path, ahead of /usr/include.
set(_bundle "${COHORT_DEPS_BUNDLE}")
foreach(_need include/nlohmann/json.hpp include/toml.hpp include/CLI/CLI.hpp include/fmt/format.h
              include/sqlite3.h include/zlib.h lib/libsqlite3.a lib/libz.a)
  if(NOT EXISTS "${_bundle}/${_need}")
    message(FATAL_ERROR "COHORT_DEPS_BUNDLE=${_bundle}: ${_need} is missing; make the bundle with "
                        "scripts/deps-bundle on a machine with Debian's packages")
  endif()
endforeach()
message(STATUS "cohort: dependencies from the bundle ${_bundle}")

foreach(_target nlohmann_json::nlohmann_json toml11::toml11 CLI11::CLI11)
  add_library(${_target} INTERFACE IMPORTED)
  set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_bundle}/include")
endforeach()
add_library(fmt::fmt-header-only INTERFACE IMPORTED)
set_target_properties(fmt::fmt-header-only PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_bundle}/include"
  INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
add_library(SQLite::SQLite3 STATIC IMPORTED)
set_target_properties(SQLite::SQLite3 PROPERTIES
  IMPORTED_LOCATION "${_bundle}/lib/libsqlite3.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_bundle}/include"
  INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};m")
add_library(ZLIB::ZLIB STATIC IMPORTED)
set_target_properties(ZLIB::ZLIB PROPERTIES
  IMPORTED_LOCATION "${_bundle}/lib/libz.a"
  INTERFACE_INCLUDE_DIRECTORIES "${_bundle}/include")
