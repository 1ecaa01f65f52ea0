"""Plain decoding and prompt lookup as users already have them (transformers' ``generate()``, llama.cpp), run beside goose by the bench."""
