//! The GGML type ids as llama.cpp's ggml.h numbers and names them: every GGUF tensor's type,
//! known to hyoka or not.

/// llama.cpp's name of a GGML type (ggml.h's `enum ggml_type`), or None for a number it
/// does not define.
pub fn type_name(id: u32) -> Option<&'static str> {
    const NAMES: [&str; 43] = [
        "F32", "F16", "Q4_0", "Q4_1", "", "", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K",
        "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
        "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "", "", "", "TQ1_0",
        "TQ2_0", "", "", "", "MXFP4", "NVFP4", "Q1_0", "Q2_0",
    ];
    NAMES
        .get(id as usize)
        .copied()
        .filter(|name| !name.is_empty())
}
