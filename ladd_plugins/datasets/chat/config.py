"""Options of the instruction dataset (torch-free, and free of `datasets`/`transformers`, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass, field

from registry.errors import InvalidConfigError
from registry.ranges import check_choice, check_range
from registry.toolkit.options import LOCAL_PATH

#: auto: the tokenizer's chat template when it has one, else plain; tokenizer: its template (refused without one);
#: none: plain (a prompt's ids, then the response's)
CHAT_TEMPLATES = ("auto", "tokenizer", "none")
#: what happens to a pair whose prompt fits the length and whose response does not: left out, or cut at the length
OVERFLOWS = ("drop", "truncate")


@dataclass
class ChatDatasetConfig:
    """Prompt/response pairs and chat transcripts, framed by the tokenizer's chat template and padded with its EOS.

    ``source``: the shipped ``arithmetic`` or ``increments`` pairs, a local ``.jsonl`` file, folder or glob, or a
    Hugging Face dataset (its id, or ``hf:PATH`` for anything ``datasets.load_dataset`` reads). A row holds
    ``messages`` (a list of ``{role, content}`` turns, needing a chat template) or ``prompt`` and ``response``
    (field names are options). Every assistant turn becomes one row of ``seq_len`` ids: the turns before it (the
    prompt, never noised and never scored) then the turn, padded with EOS, which counts as response (the model
    learns to stop). ``split_map`` maps ladd's splits to source splits with row slices in Hugging Face's syntax (as
    the text dataset).
    """

    # arithmetic or increments (shipped), local .jsonl files, a Hugging Face dataset id, or hf:PATH
    source: str = "arithmetic"
    subset: str | None = None  # the Hugging Face configuration
    revision: str | None = None  # Hugging Face sources: a commit, tag or branch
    split_map: dict[str, str] = field(default_factory=dict)  # overrides the default fractions of 'train', key by key
    tokenizer: str = "gpt2-bpe"  # as the text dataset's: gpt2-bpe, text8, chars, a Hugging Face name or a folder
    chat_template: str = "auto"  # auto, tokenizer (required) or none: see CHAT_TEMPLATES
    seq_len: int = 64  # S: ids per row, prompt included
    overflow: str = "drop"  # a response past seq_len: drop the pair, or truncate the response
    messages_field: str = "messages"
    prompt_field: str = "prompt"
    response_field: str = "response"
    # prepared rows; None: $LADD_CACHE_DIR, else ~/.cache/ladd (XDG_CACHE_HOME honoured); never read from a saved config
    cache_dir: str | None = field(default=None, metadata=LOCAL_PATH)

    def __post_init__(self) -> None:
        check_range("dataset.seq_len", self.seq_len, 2)
        check_choice("dataset.chat_template", self.chat_template, CHAT_TEMPLATES)
        check_choice("dataset.overflow", self.overflow, OVERFLOWS)
        if not self.source:
            raise InvalidConfigError("dataset.source='' is not valid: name the pairs (arithmetic, files, a hub id)")
