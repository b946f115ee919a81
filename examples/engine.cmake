# examples/engine.cmake - train_gpt, sample_gpt and the embedded default corpus (owner: I/O).
#
# The default corpus: the project's own prose (README, the architecture map, the reliability
# notes; not the benchmark tables or the headers, whose numbers and code a small byte-level model
# cannot learn in a demo's minutes), concatenated at configure time (runs of spaces squeezed to
# one), then embedded by ct_embed_files (CMake only, no Python): train_gpt trains on real text
# with no data given.
set(CT_CORPUS_FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/ARCHITECTURE.md
    ${CMAKE_SOURCE_DIR}/docs/RELIABILITY.md)
list(SORT CT_CORPUS_FILES)
set(CT_CORPUS_TEXT "")
foreach(f IN LISTS CT_CORPUS_FILES)
  file(READ "${f}" body)
  string(REGEX REPLACE "  +" " " body "${body}")
  file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${f}")
  string(APPEND CT_CORPUS_TEXT "\n==> ${rel} <==\n${body}")
endforeach()
set(CT_CORPUS_FILE ${CMAKE_CURRENT_BINARY_DIR}/corpus/corpus.txt)
set(old "")
if(EXISTS ${CT_CORPUS_FILE})
  file(READ ${CT_CORPUS_FILE} old)
endif()
if(NOT old STREQUAL CT_CORPUS_TEXT)
  file(WRITE ${CT_CORPUS_FILE} "${CT_CORPUS_TEXT}")
endif()
set_property(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${CT_CORPUS_FILES})
ct_embed_files(${CMAKE_CURRENT_BINARY_DIR}/ct_corpus.c ct_corpus ${CT_CORPUS_FILE})
add_library(ct_corpus STATIC ${CMAKE_CURRENT_BINARY_DIR}/ct_corpus.c)
target_link_libraries(ct_corpus PRIVATE ct_cl)

if(TARGET ct_engine)
  add_executable(train_gpt ${CMAKE_CURRENT_SOURCE_DIR}/train_gpt.c ${CMAKE_CURRENT_SOURCE_DIR}/train_report.c)
  target_link_libraries(train_gpt PRIVATE ct_engine ct_corpus m)
  add_executable(sample_gpt ${CMAKE_CURRENT_SOURCE_DIR}/sample_gpt.c)
  target_link_libraries(sample_gpt PRIVATE ct_engine m)
endif()
