"""The instruction dataset: framing by a chat template or plainly, one response per row padded with EOS, prompts
found again from a batch's ids, and bad input refused in one line before anything is cached."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from chat_fixtures import arithmetic_pairs, chat_tokenizer, write_jsonl

from ladd_plugins.datasets.chat.dataset import ChatDataset, ChatDatasetConfig
from registry.errors import InvalidConfigError, LaddError

PAIR = {"prompt": "what is one plus two ?", "response": "three ."}


def make(tmp_path: Path, rows: list[dict], template: bool = True, **options) -> ChatDataset:
    """A dataset over ``rows`` (the whole file is every split) with the test's word tokenizer."""
    tokenizer = chat_tokenizer(tmp_path / ("templated" if template else "plain"), template)
    options = {"seq_len": 16, "split_map": {"train": "train", "validation": "train"}, **options}
    source = options.pop("source", None) or write_jsonl(tmp_path / "rows.jsonl", rows)
    return ChatDataset(ChatDatasetConfig(source=source, tokenizer=tokenizer, cache_dir=str(tmp_path / "cache"),
                                         **options))


def words(dataset: ChatDataset, ids) -> list[str]:
    return dataset.tokenizer.convert_ids_to_tokens([int(i) for i in ids])


def test_a_pair_is_the_templated_prompt_then_the_response_then_eos(tmp_path):
    dataset = make(tmp_path, [PAIR])
    rows = dataset.rows("train")
    prompt = ["<s>", "<|user|>", "what", "is", "one", "plus", "two", "?", "<|end|>", "<|assistant|>"]
    assert words(dataset, rows.ids[0]) == [*prompt, "three", ".", "<|end|>", "<eos>", "<eos>", "<eos>"]
    assert rows.prompts.tolist() == [len(prompt)]
    batch = next(dataset.batches(3, 0))
    assert torch.equal(dataset.context(batch), torch.arange(16).expand(3, 16) < len(prompt))
    assert dataset.padding(batch) is None, "EOS padding is response: the model learns to stop"
    assert words(dataset, dataset.prompt_ids("say hello")) == ["<s>", "<|user|>", "say", "hello", "<|end|>",
                                                               "<|assistant|>"]


def test_every_assistant_turn_of_a_chat_is_a_row_given_the_turns_before_it(tmp_path):
    chat = {"messages": [
        {"role": "system", "content": "say hello"}, {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"},
        {"role": "assistant", "content": "four"},
    ]}
    dataset = make(tmp_path, [chat], seq_len=24)
    rows = dataset.rows("train")
    first, second = (words(dataset, row[:length]) for row, length in zip(rows.ids, rows.prompts, strict=True))
    assert first[-4:] == ["<|user|>", "one", "<|end|>", "<|assistant|>"]
    assert second[-7:] == ["<|assistant|>", "two", "<|end|>", "<|user|>", "three", "<|end|>", "<|assistant|>"]
    assert first[:4] == second[:4] == ["<s>", "<|system|>", "say", "hello"]
    assert words(dataset, rows.ids[1][rows.prompts[1]:rows.prompts[1] + 3]) == ["four", "<|end|>", "<eos>"]


def test_without_a_template_a_pair_is_its_texts_ids(tmp_path):
    dataset = make(tmp_path, [PAIR], template=False)
    assert not dataset.framing.templated and dataset.prompt_ids("one") is None
    row = dataset.rows("train").ids[0]
    assert words(dataset, row[:9]) == ["what", "is", "one", "plus", "two", "?", "three", ".", "<eos>"]
    assert dataset.rows("train").prompts.tolist() == [6]


def test_the_stream_resumes_and_its_rows_keep_their_prompts_across_splits(tmp_path):
    dataset = make(tmp_path, arithmetic_pairs(30), split_map={"train": "train[:20]", "validation": "train[20:]"})
    stream, resumed = dataset.batches(4, 1), dataset.batches_from(5, 4, 1)
    later, again = [next(stream) for _ in range(8)][5:], [next(resumed) for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(later, again, strict=True))
    held_out = next(dataset.batches(10, 0, "validation"))
    assert (dataset.context(held_out).sum(dim=1) == 10).all()
    with pytest.raises(LaddError, match="did not make"):
        dataset.context(torch.full((1, 16), 5))


def test_overflowing_pairs_are_dropped_or_cut_with_a_note(tmp_path, capsys):
    long = {"prompt": "what is one ?", "response": " ".join(["two"] * 20)}
    dropped = make(tmp_path / "a", [PAIR, long])
    assert len(dropped.rows("train").ids) == 1
    assert "1 left out as longer than dataset.seq_len=16" in capsys.readouterr().err
    cut = make(tmp_path / "b", [PAIR, long], overflow="truncate")
    assert len(cut.rows("train").ids) == 2 and words(cut, cut.rows("train").ids[1])[-1] == "two"


def test_a_row_spelling_a_special_token_is_left_out_under_a_template(tmp_path, capsys):
    dataset = make(tmp_path, [PAIR, {"prompt": "say <|end|> one", "response": "two"}])
    assert len(dataset.rows("train").ids) == 1
    assert "1 rows left out whose text spells a special token" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([PAIR, {"prompt": "what is one ?"}], r"rows.jsonl:2 has a 'prompt' but no 'response'"),
        ([{"text": "one"}], r"rows.jsonl:1 has neither 'messages' nor 'prompt'"),
        ([{"messages": [{"role": "user", "content": "one"}]}], r"rows.jsonl:1 has no assistant turn"),
        ([{"prompt": " ".join(["one"] * 20), "response": "two"}], r"rows.jsonl:1: the prompt takes 24 ids"),
    ],
)
def test_bad_rows_are_refused_in_one_line_and_nothing_is_cached(tmp_path, rows, message):
    dataset = make(tmp_path, rows)
    with pytest.raises(LaddError, match=message) as caught:
        dataset.prepare(["train"])
    assert "\n" not in str(caught.value)
    assert not any((tmp_path / "cache").rglob("*.npy"))


def test_a_template_asked_of_a_tokenizer_without_one_is_refused(tmp_path):
    with pytest.raises(InvalidConfigError, match="chat_template=tokenizer but tokenizer .* has no chat template"):
        make(tmp_path, [PAIR], template=False, chat_template="tokenizer")


def test_a_hugging_face_dataset_of_chats(tmp_path):
    folder = tmp_path / "hub" / "data"
    folder.mkdir(parents=True)
    chats = [{"messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]}] * 3
    (folder / "train.jsonl").write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    tokenizer = chat_tokenizer(tmp_path / "tokenizer")
    dataset = ChatDataset(ChatDatasetConfig(
        source=f"hf:{folder.parent}", tokenizer=tokenizer, seq_len=8, cache_dir=str(tmp_path / "cache"),
        split_map={"train": "train[:2]"},
    ))
    rows = dataset.rows("train")
    assert len(rows.ids) == 2 and words(dataset, rows.ids[0][rows.prompts[0]:]) == ["two", "<|end|>", "<eos>"]


def test_a_last_row_without_a_response_in_the_held_out_slice_is_refused_before_training(tmp_path):
    rows = [PAIR] * 19 + [{"prompt": "what is one ?"}]  # the default slices put the last row in the test split
    dataset = make(tmp_path, rows, split_map={})
    with pytest.raises(LaddError, match=r"rows.jsonl:20 has a 'prompt' but no 'response'"):
        dataset.prepare(["train"])
    assert not any((tmp_path / "cache").rglob("*.npy"))


def test_a_file_that_is_not_utf8_is_refused_in_one_line_naming_its_line(tmp_path):
    dataset = make(tmp_path, [PAIR, PAIR])
    with (tmp_path / "rows.jsonl").open("ab") as handle:
        handle.write(b'{"prompt": "caf\xe9", "response": "one ."}\n')  # Latin-1
    with pytest.raises(LaddError) as refused:
        dataset.prepare(["train"])
    assert str(refused.value) == (
        f"{tmp_path / 'rows.jsonl'}:3 is not UTF-8 text (byte 0xe9); convert the file, e.g. iconv -f latin1 -t utf-8"
    )


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_source_that_is_a_device_or_pipe_is_named_as_such(tmp_path, target):
    import os

    if target == "fifo":
        os.mkfifo(tmp_path / "pipe")
        target = str(tmp_path / "pipe")
    (tmp_path / "chats.jsonl").symlink_to(target)
    with pytest.raises(LaddError) as refused:
        make(tmp_path, [PAIR], source=str(tmp_path / "chats.jsonl")).prepare(["train"])
    assert str(refused.value) == (
        f"dataset source {tmp_path / 'chats.jsonl'} is not a regular file (a device, pipe or folder); ladd reads only "
        f"regular files"
    )
