# SPDX-License-Identifier: MIT
# The Redis connector's tests (included by tests/CMakeLists.txt when
# src/redis built libpkv_redis): the connector alone against a private
# redis-server the test starts on a free port (77: no redis-server, skipped),
# and the library's exports.
pkv_add_test(test_redis SOURCES test_redis.c redis_server.c tcp_proxy.c
  LABELS redis)
find_package(Threads REQUIRED)
target_link_libraries(test_redis PRIVATE pkv_redis PkgConfig::HIREDIS
  Threads::Threads)
set_tests_properties(test_redis PROPERTIES SKIP_RETURN_CODE 77)
pkv_test_timeout(test_redis 600)

# libpkv_redis.so exports exactly the functions pkv_redis.h declares.
add_test(NAME exported_symbols_redis
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/check_exports.sh
          $<TARGET_FILE:pkv_redis>
          ${PROJECT_SOURCE_DIR}/include/pkv/pkv_redis.h)

# Engines sharing blocks through a private redis-server: two processes,
# both backends, the server's faults (test_store_redis.c).
pkv_add_test(test_store_redis SOURCES test_store_redis.c redis_server.c
  ${PKV_CHECK_HOST} LABELS redis)
target_link_libraries(test_store_redis PRIVATE pkv_redis PkgConfig::HIREDIS)
if(PKV_WITH_OPENCL)
  target_compile_definitions(test_store_redis PRIVATE PKV_HAVE_OPENCL)
endif()
pkv_test_timeout(test_store_redis 1200)
set_tests_properties(test_store_redis PROPERTIES SKIP_RETURN_CODE 77
  ENVIRONMENT
  "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan.supp")

# The engine fuzzer's replay driver with its store on a redis-server
# (fuzz_engine.c, PKV_FUZZ_REDIS): test_store_redis runs it, seeded, against
# the server it started.
add_executable(fuzz_engine_redis fuzz/replay.c ${PKV_FUZZ_ENGINE_SOURCES})
target_link_libraries(fuzz_engine_redis PRIVATE pkv_internal pkv_redis m)
target_compile_options(fuzz_engine_redis PRIVATE ${PKV_WARNINGS})
target_compile_definitions(fuzz_engine_redis PRIVATE PKV_FUZZ_REDIS)
add_dependencies(test_store_redis fuzz_engine_redis)
target_compile_definitions(test_store_redis PRIVATE
  PKV_FUZZ_REDIS_BINARY="$<TARGET_FILE:fuzz_engine_redis>")

# The reply reader's fuzz target (src/redis/reply.c: what a server sends,
# hostile or not): the replay driver over its corpus, then seeded random
# inputs up to 50,000 (8 s in a release build); with clang a libFuzzer
# binary, built but not run by ctest.
pkv_add_fuzz_target(fuzz_reply
  SOURCES fuzz/fuzz_reply.c ${PROJECT_SOURCE_DIR}/src/redis/reply.c
    ${PROJECT_SOURCE_DIR}/src/redis/io.c
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/reply OPS 50000
  LIBS Threads::Threads INCLUDES ${PROJECT_SOURCE_DIR}/src/redis)
set_tests_properties(fuzz_reply_replay PROPERTIES LABELS redis)
