"""Options of the text dataset (torch-free, and free of `datasets`/`transformers`, for fast listing)."""
from __future__ import annotations

from dataclasses import dataclass, field

from registry.toolkit.options import LOCAL_PATH

from .detokenizers import DETOKENIZERS

PACKINGS = ("wrap", "pad")
TXT_DOCUMENTS = ("paragraph", "line", "file")


@dataclass
class TextDatasetConfig:
    """Where the text comes from, how it is tokenised and how it becomes rows of ``seq_len`` token ids.

    ``source``: a known name (``lm1b``, ``openwebtext``, ``text8``, ``ptb``, ``wikitext103``, ``wikitext2``,
    ``lambada``, ``ag_news``, ``pubmed``, ``arxiv``, or the shipped ``shakespeare``), a Hugging Face dataset
    id, ``hf:PATH`` for anything else ``datasets.load_dataset`` reads, or a local ``.txt``/``.jsonl``/``.parquet``
    file, folder or glob. ``split_map`` maps ladd's splits (``train``, ``validation``, ``test``, ``floor``) to
    source splits with optional row slices in Hugging Face's syntax (``train[:-100000]``, ``train[90%:95%]``);
    local files form one split called ``train``. On the command line: ``+dataset.split_map.validation='test'``
    (the ``+`` because the map starts empty). ``vocab_size`` is the expected number K of real tokens
    (the mask is id K): tools can size models from it without loading anything, and it is checked
    against the tokenizer when the dataset is built.
    """

    source: str = "shakespeare"  # a known corpus, a Hugging Face dataset id, hf:PATH, or local files
    subset: str | None = None  # the Hugging Face configuration (e.g. wikitext-103-raw-v1); known sources set theirs
    revision: str | None = (
        None  # Hugging Face sources: a commit, tag or branch; pin it so the token cache follows the data
    )
    split_map: dict[str, str] = field(default_factory=dict)  # overrides the source's defaults, key by key
    text_field: str | None = None  # None: the known source's field, else "text"
    # "gpt2-bpe" (offline GPT-2 BPE), "text8" (characters), "chars" (letters, digits, punctuation), a HF name or folder
    tokenizer: str = "gpt2-bpe"
    seq_len: int = 128  # S: token ids per row
    packing: str = "wrap"  # wrap: documents + EOS concatenated and cut; pad: one document per row, EOS-padded
    txt_documents: str = "paragraph"  # what a document is in a .txt file: paragraph, line or the whole file
    detokenizer: str = "auto"  # auto: the known source's; none; or one of DETOKENIZERS
    vocab_size: int | None = None  # expected K, checked against the tokenizer; None: the tokenizer's
    streaming: bool = False  # Hugging Face sources only: read on the fly, no download and no token cache
    # token cache; None: $LADD_CACHE_DIR, else ~/.cache/ladd (XDG_CACHE_HOME honoured); never read from a saved config
    cache_dir: str | None = field(default=None, metadata=LOCAL_PATH)
    progress: bool = True  # show tokenising progress
    num_proc: int | None = None  # worker processes that tokenise a split; None: every core this process may use

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"text seq_len must be >= 2 (a token and the EOS), got {self.seq_len}")
        if self.packing not in PACKINGS:
            raise ValueError(f"text packing must be one of {', '.join(PACKINGS)}, got {self.packing!r}")
        if self.txt_documents not in TXT_DOCUMENTS:
            raise ValueError(
                f"text txt_documents must be one of {', '.join(TXT_DOCUMENTS)}, got {self.txt_documents!r}"
            )
        detokenizers = ("auto", "none", *DETOKENIZERS)
        if self.detokenizer not in detokenizers:
            raise ValueError(f"text detokenizer must be one of {', '.join(detokenizers)}, got {self.detokenizer!r}")
        if self.num_proc is not None and self.num_proc < 1:
            raise ValueError(f"text num_proc must be >= 1 or null (every core), got {self.num_proc}")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ValueError(f"text vocab_size must be >= 1 or null, got {self.vocab_size}")
