"""Moving a CPU ``torch.Generator`` past draws without making them: Mersenne Twister jump-ahead.

torch's CPU generator is MT19937, and a float64 uniform takes two of its 32-bit outputs. Its
19937-bit state advances by a linear map T over GF(2) whose characteristic polynomial phi has degree
19937, so advancing by m words is the map ``(x^m mod phi)(T)``: about log2(m) polynomial squarings
and 19937 single steps, whatever m is (Haramoto et al., "Efficient jump ahead for F2-linear random
number generators", 2008). The result is checked once per process against real draws; if this
torch stores or consumes its generator otherwise, the draws are made and discarded instead.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

__all__ = ["skip_doubles"]

_N, _M = 624, 397  # words in the state array; offset of the word each new word mixes in
_DEGREE = 19937  # bits of state: the top bit of the oldest word and the 623 words after it
_MATRIX_A, _UPPER, _LOWER = 0x9908B0DF, 0x80000000, 0x7FFFFFFF
# torch's CPUGeneratorImplState: seed u64, left i32, seeded i32, next u64, 624 words stored as u64, normal-sample caches
_LEFT, _NEXT, _WORDS, _STATE_BYTES = 8, 16, 24, 5056
_WORDS_PER_DOUBLE = 2
_CHUNK = 1 << 22  # doubles drawn at once by the fallback


def skip_doubles(generator: torch.Generator, count: int) -> None:
    """Advance ``generator`` (CPU) exactly as drawing ``count`` float64 uniforms would, without drawing them."""
    if count < 0:
        raise ValueError(f"cannot skip a negative number of draws ({count})")
    if _jump_is_exact():
        _jump(generator, _WORDS_PER_DOUBLE * count)
    else:
        _draw(generator, count)


def _draw(generator: torch.Generator, count: int) -> None:
    while count > 0:
        torch.rand(min(count, _CHUNK), generator=generator, dtype=torch.float64)
        count -= _CHUNK


@functools.cache
def _jump_is_exact() -> bool:
    """Whether jumping matches real draws on this torch (it relies on the generator's byte layout)."""
    drawn, jumped = torch.Generator().manual_seed(20080101), torch.Generator().manual_seed(20080101)
    if drawn.get_state().numel() != _STATE_BYTES:
        return False
    for count in (1, 700, 311):  # within a block, across two block refills, then from mid-block
        torch.rand(count, generator=drawn, dtype=torch.float64)
        _jump(jumped, _WORDS_PER_DOUBLE * count)
        if not torch.equal(drawn.get_state(), jumped.get_state()):
            return False
    return True


def _jump(generator: torch.Generator, words: int) -> None:
    """Advance by ``words`` 32-bit outputs, leaving the state torch itself would have after drawing them."""
    if words == 0:
        return
    state = generator.get_state().numpy().copy()
    left = int(state[_LEFT:_LEFT + 4].view("<i4")[0])
    block = state[_WORDS:_WORDS + 8 * _N].view("<u8").astype(np.uint32)
    used = _N + 1 - left + words  # outputs taken from the current block, counting those to skip
    if used > _N:
        refills = (used - 1) // _N
        used -= refills * _N
        # The block holds words W_k..W_k+623; after r refills it holds W_k+624r.. Jumping the state to
        # one word short and stepping once yields every bit of the oldest word, which is output too.
        window = _apply(_power_of_x(_N * refills - 1), block)
        block = np.append(window, _next_word(window))[1:]
    state[_WORDS:_WORDS + 8 * _N] = block.astype("<u8").view(np.uint8)
    state[_LEFT:_LEFT + 4] = np.array([_N + 1 - used], dtype="<i4").view(np.uint8)
    state[_NEXT:_NEXT + 8] = np.array([used], dtype="<u8").view(np.uint8)
    generator.set_state(torch.from_numpy(state))


def _next_word(window: np.ndarray) -> int:
    """The word following a window of 624 words: the MT19937 recurrence."""
    mixed = (int(window[0]) & _UPPER) | (int(window[1]) & _LOWER)
    return int(window[_M]) ^ (mixed >> 1) ^ (_MATRIX_A if mixed & 1 else 0)


def _apply(polynomial: int, window: np.ndarray) -> np.ndarray:
    """``polynomial(T)`` applied to a window of 624 words, by Horner's rule (the oldest word's low bits are left
    undefined)."""
    words = np.zeros(_N + polynomial.bit_length(), dtype=np.uint32)
    start = 0
    for power in range(polynomial.bit_length() - 1, -1, -1):
        words[start + _N] = _next_word(words[start : start + _M + 1])
        start += 1
        if polynomial >> power & 1:
            words[start : start + _N] ^= window
    return words[start : start + _N]


def _power_of_x(exponent: int) -> int:
    """``x^exponent mod phi`` (bit i holds the coefficient of x^i), by repeated squaring."""
    phi = _characteristic_polynomial()
    result = 1
    for bit in bin(exponent)[2:]:
        result = _reduce(_square(result), phi)
        if bit == "1":
            result = _reduce(result << 1, phi)
    return result


# Squaring over GF(2) spreads the bits apart: byte b becomes the 16-bit word with b's bits at even places.
_SPREAD = np.array([sum(((b >> i) & 1) << (2 * i) for i in range(8)) for b in range(256)], dtype="<u2")


def _square(polynomial: int) -> int:
    data = np.frombuffer(polynomial.to_bytes((polynomial.bit_length() + 7) // 8 or 1, "little"), dtype=np.uint8)
    return int.from_bytes(_SPREAD[data].tobytes(), "little")


def _reduce(polynomial: int, modulus: int) -> int:
    degree = modulus.bit_length()
    while polynomial.bit_length() >= degree:
        polynomial ^= modulus << (polynomial.bit_length() - degree)
    return polynomial


@functools.cache
def _characteristic_polynomial() -> int:
    """phi, found as the minimal polynomial of one output bit of the recurrence (Berlekamp-Massey)."""
    words = list(range(1, _N + 1))  # any nonzero state: phi is irreducible, so every such sequence has it
    bits = []
    for i in range(2 * _DEGREE):
        mixed = (words[i] & _UPPER) | (words[i + 1] & _LOWER)
        words.append(words[i + _M] ^ (mixed >> 1) ^ (_MATRIX_A if mixed & 1 else 0))
        bits.append(words[-1] & 1)
    connection, length = _berlekamp_massey(bits)
    if length != _DEGREE:
        raise AssertionError(f"the MT19937 recurrence has linear complexity {length}, not {_DEGREE}")
    # s_n = sum_i c_i s_(n-i) for the connection polynomial C; phi(x) = x^L C(1/x) reverses its coefficients.
    return int(format(connection, f"0{length + 1}b")[::-1], 2)


def _berlekamp_massey(bits: list[int]) -> tuple[int, int]:
    """The shortest linear recurrence of a bit sequence: its connection polynomial and length."""
    connection, previous, length, gap, recent = 1, 1, 0, 1, 0
    for n, bit in enumerate(bits):
        recent = recent << 1 | bit  # bit j holds s_(n-j)
        if (connection & recent).bit_count() & 1 == 0:
            gap += 1
        elif 2 * length <= n:
            connection, previous = connection ^ previous << gap, connection
            length, gap = n + 1 - length, 1
        else:
            connection ^= previous << gap
            gap += 1
    return connection, length
