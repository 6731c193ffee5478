"""Tiny instruction data for tests: a word tokenizer with a chat template (and, like LLaDA's, a mask token of its
own in the middle of its vocabulary), and JSONL pairs over its words."""
from __future__ import annotations

import json
from pathlib import Path

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
WORDS = ["what", "is", "plus", "minus", "?", ".", "hello", "say", *NUMBERS]
#: the template frames each turn as ``<|role|> text <|end|>`` after a BOS, and opens the assistant's turn when asked
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
SPECIAL = ["<s>", "<eos>", "<|own_mask|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]


def chat_tokenizer(folder: Path, template: bool = True) -> str:
    """A whitespace word tokenizer saved to ``folder``: [UNK], the special tokens, then the words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(["[UNK]", *SPECIAL, *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", bos_token="<s>", eos_token="<eos>",
        additional_special_tokens=SPECIAL[2:],
    )
    if template:
        tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    return str(folder)


def arithmetic_pairs(count: int) -> list[dict]:
    """``count`` prompt/response rows over the tokenizer's words, cycling through small sums."""
    rows = []
    for index in range(count):
        a, b = index % 5, (index // 5) % 5
        rows.append({"prompt": f"what is {NUMBERS[a]} plus {NUMBERS[b]} ?", "response": f"{NUMBERS[a + b]} ."})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> str:
    """``rows`` as a JSONL file; returns its path."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)
