"""Codes computed from the distinct values equal the codes computed value by value.

The builder (``tracesim.build.instantiate._factor``) and the Chakra importer
(``tracesim.interop.chakra_ranks._dense``) number values by hashing or by a bincount
instead of one dictionary lookup or one sort per value; these checks compare them with the
plain definitions on random inputs, including the inputs that take their fallbacks.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracesim.build.instantiate import _factor, _Vocab
from tracesim.interop.chakra_ranks import _dense


def _by_value(values: list[object]) -> tuple[list[int], list[str]]:
    index: dict[str, int] = {}
    return [index.setdefault(str(v), len(index)) for v in values], list(index)


@pytest.mark.parametrize("seed", range(20))
def test_factor_is_first_appearance_numbering_of_the_strings(seed: int):
    rng = np.random.default_rng(seed)
    pool: list[object] = ["gpu", "coll", "send", "", "tp", "pp|f|1"]
    if seed % 3 == 1:
        pool += [None, 1, 1.0, True]  # missing and non-string values: the fallback
    n = int(rng.integers(0, 300))
    values = [pool[int(i)] for i in rng.integers(0, len(pool), n)]
    arr = np.array(values + [None], dtype=object)[:n]
    codes, names = _factor(arr)
    want_codes, want_names = _by_value(values)
    assert codes.tolist() == want_codes
    assert names == want_names


def test_vocab_codes_continue_one_numbering_across_calls():
    vocab = _Vocab()
    a = vocab.codes(np.array(["x", "y", "x"], dtype=object))
    b = vocab.codes(np.array(["z", "y", None], dtype=object))
    assert a.tolist() == [0, 1, 0]
    assert b.tolist() == [2, 1, 3]
    assert list(vocab.index) == ["x", "y", "z", "None"]


@pytest.mark.parametrize("seed", range(30))
def test_dense_is_the_inverse_of_unique(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    base = int(rng.integers(0, 1000))
    if seed % 2:  # a run of consecutive ids (a rank's lanes), shuffled: the bincount path
        values = base + rng.permutation(n) % max(1, int(rng.integers(1, n + 2)))
    else:  # ids with gaps: the sorting path
        values = base + rng.integers(0, 3 * n + 1, n)
    values = values.astype(rng.choice([np.int16, np.int32, np.int64]))
    want = np.unique(values, return_inverse=True)[1].astype(np.int64).reshape(-1)
    assert np.array_equal(_dense(values), want)
