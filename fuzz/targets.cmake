# fuzz/targets.cmake - the fuzz targets and what each is built from; included by
# tests/fuzz.cmake (the corpus replay, normal build) and fuzz/CMakeLists.txt (libFuzzer build).
set(CT_FUZZ_DIR ${CMAKE_SOURCE_DIR}/fuzz)
set(CT_FUZZ_IO_SRC ${CT_ENGINE_HOST_SRC})
set(CT_FUZZ_TARGETS model_file shards checkpoint manifest tokenizer tune select hf_config hf_model
    hf_index hf_llama_model)

# ct_fuzz_sources(target out_sources out_libs): what a target is built from (shared with fuzz/).
macro(ct_fuzz_sources t srcs libs)
  set(${srcs} ${CT_FUZZ_DIR}/fuzz_${t}.c)
  if(t STREQUAL "tune")
    set(${libs} ct_cl)
  elseif(t STREQUAL "select")
    set(${libs} ct_parallel)
  else()
    list(APPEND ${srcs} ${CT_FUZZ_IO_SRC})
    set(${libs} ct_cl m)
  endif()
endmacro()
