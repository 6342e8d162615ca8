//! The integration tests, one module per subject, in one test binary: candle and the library
//! are linked once, and the GPU check runs a subject alone with its module as the filter
//! (`cargo test --test suite -- runtime_parity::`). Tests that set process environment variables
//! live in their own binary (tests/model_loading.rs).

#[path = "../common/mod.rs"]
mod common;

mod alt_test_parity;
mod attention_scale;
mod backend_ops;
mod batch_invariance;
mod bertscore_defaults;
mod bertscore_parity;
mod bertscore_run;
mod bias_parity;
mod breakdown_parity;
mod chance_parity;
mod chat_template_parity;
mod cli;
mod combination_parity;
mod converter_real_vocab;
mod data_import;
mod dbdc3_trees;
mod decode_attention;
mod dslc3;
mod duo;
mod english_route;
mod eval_merge;
mod expand_kernels;
mod fused_attention;
mod gguf_converter;
mod gguf_parity;
mod gguf_tokenizers;
mod hostile_input;
mod interrupted_runs;
mod iq_rows;
mod iquant_blocks;
mod judge_json;
mod judge_parity;
mod judge_run;
mod last_layer_reads;
mod length_controlled_parity;
mod likelihood;
mod llama_cpp_vocabs;
mod meta_parity;
mod multilingual_encoder;
mod pairwise;
mod prefill_gemm_bf16;
mod prefill_gemm_int8;
mod results_integrity;
mod rope_scaling;
mod rubrics;
mod runtime_parity;
mod stored_weights;
mod summary_schema;
mod translate;
