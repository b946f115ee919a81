# examples/engine.cmake - train_gpt, sample_gpt and the embedded default corpus (owner: I/O).
#
# The default corpus: the project's own public headers and docs, embedded at configure time by
# ct_embed_files (CMake only, no Python), so train_gpt trains on real text with no data given.
file(GLOB CT_CORPUS_FILES CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/*.md
  ${CMAKE_SOURCE_DIR}/cl/ct_*.h ${CMAKE_SOURCE_DIR}/engine/ct_*.h
  ${CMAKE_SOURCE_DIR}/parallel/ct_*.h ${CMAKE_SOURCE_DIR}/tests/ct_test.h)
list(SORT CT_CORPUS_FILES)
ct_embed_files(${CMAKE_CURRENT_BINARY_DIR}/ct_corpus.c ct_corpus ${CT_CORPUS_FILES})
add_library(ct_corpus STATIC ${CMAKE_CURRENT_BINARY_DIR}/ct_corpus.c)
target_link_libraries(ct_corpus PRIVATE ct_cl)

if(TARGET ct_engine)
  add_executable(train_gpt ${CMAKE_CURRENT_SOURCE_DIR}/train_gpt.c)
  target_link_libraries(train_gpt PRIVATE ct_engine ct_corpus m)
  add_executable(sample_gpt ${CMAKE_CURRENT_SOURCE_DIR}/sample_gpt.c)
  target_link_libraries(sample_gpt PRIVATE ct_engine m)
endif()
