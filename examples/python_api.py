"""goose from Python, on the embedded model (SmolLM2-135M-Instruct): the three entry points.

    python examples/python_api.py
"""

from __future__ import annotations

import drafting

PROMPT = "Write a haiku about geese."

# 1. One call, a whole answer. The model loads on the first call and stays loaded for the next ones.
g = drafting.generate(PROMPT, max_new_tokens=32)
plain = drafting.generate(PROMPT, max_new_tokens=32, speculator="ar")  # plain decoding, for comparison
print(g.text)
print(f"{g.stats['tokens']} tokens in {g.stats['steps']} steps ({g.stats['mean_accepted']:.2f} per step), "
      f"identical to plain decoding: {g.token_ids == plain.token_ids}")

# 2. Streamed: each piece is the text one verified step added, with that step's record beside it.
for piece in drafting.stream("Name three birds, one per line.", max_new_tokens=40, stop=["\n\n"]):
    print(piece.text, end="", flush=True)
print()

# 3. Inside transformers' own generate(), on a model loaded by plain transformers.
from transformers import AutoModelForCausalLM, AutoTokenizer, TextStreamer  # noqa: E402

folder = drafting.embedded_model_folder()  # the embedded GGUF as a plain transformers folder
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
inputs = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                       return_tensors="pt", return_dict=True)
out = model.generate(**inputs, custom_generate=drafting.custom_generate, speculator="goose", max_new_tokens=32,
                     streamer=TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True))
same = out.tolist() == model.generate(**inputs, max_new_tokens=32, do_sample=False).tolist()
print(f"custom_generate identical to plain generate(): {same}")
