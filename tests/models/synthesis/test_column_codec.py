"""The codec between a mixed-type table and what the synthesizers see: flow inputs, bins, decoding, labels."""

import numpy as np
import pandas as pd
import pytest

from privehr.models.synthesis.codec import MAX_LEVELS, CodecColumn, TableCodec

COLUMNS = [CodecColumn("age", "integer", 18, 100), CodecColumn("creatinine", "numeric", 0.2, 15.0),
           CodecColumn("sex", "binary", levels=("F", "M")), CodecColumn("grade", "ordinal", levels=("I", "II", "III")),
           CodecColumn("estrec", "integer", 0, 1500)]


def _frame(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"age": rng.integers(18, 101, n).astype(float), "creatinine": rng.uniform(0.2, 15, n),
                         "sex": rng.integers(0, 2, n).astype(float), "grade": rng.integers(0, 3, n).astype(float),
                         "estrec": rng.integers(0, 1501, n).astype(float)})


def test_flow_inputs_put_continuous_columns_first_and_round_trip():
    codec, frame = TableCodec(COLUMNS), _frame()
    assert [c.name for c in codec.continuous] == ["creatinine", "estrec"]  # estrec: 1501 values > MAX_LEVELS
    assert codec.cardinalities == [83, 2, 3] and 83 <= MAX_LEVELS
    x = codec.flow_inputs(frame)
    assert x.shape == (200, 5) and np.abs(x[:, :2]).max() <= 2.0 + 1e-12  # bounds map to [-2, 2]
    assert x[:, 2].min() >= 0 and x[:, 2].max() <= 82 and np.all(x[:, 2:] == np.round(x[:, 2:]))
    back = codec.from_flow(x)
    pd.testing.assert_frame_equal(back[["age", "sex", "grade", "estrec"]], frame[["age", "sex", "grade", "estrec"]])
    np.testing.assert_allclose(back["creatinine"], frame["creatinine"])


def test_decoding_makes_every_value_valid():
    codec = TableCodec(COLUMNS)
    raw = pd.DataFrame({"age": [17.2, 64.6, 130.0], "creatinine": [-1.0, 3.3, 99.0], "sex": [0.37, 1.4, -0.2],
                        "grade": [2.6, 0.49, 7.0], "estrec": [-3.0, 12.4, 1499.6]})
    decoded = codec.decode(raw)
    assert decoded["age"].tolist() == [18, 65, 100] and decoded["creatinine"].tolist() == [0.2, 3.3, 15.0]
    assert decoded["sex"].tolist() == [0, 1, 0] and decoded["grade"].tolist() == [2, 0, 2]
    assert decoded["estrec"].tolist() == [0, 12, 1500]
    labelled = codec.labels(decoded)
    assert labelled["sex"].tolist() == ["F", "M", "F"] and labelled["grade"].tolist() == ["III", "I", "III"]
    assert str(labelled["age"].dtype) == "Int64"
    pd.testing.assert_frame_equal(codec.encode_labels(labelled).astype(float), decoded.astype(float))


def test_bins_come_from_the_bounds_and_draws_stay_within_their_bin():
    codec, frame = TableCodec(COLUMNS), _frame(500, 1)
    codes = codec.discretise(frame, bins=10)
    assert codec.domain(10) == [83, 10, 2, 3, 10]
    assert codes.min() >= 0 and (codes < np.array(codec.domain(10))).all()
    back = codec.undiscretise(codes, 10, np.random.default_rng(0))
    again = codec.discretise(back, 10)
    assert (again[:, :4] == codes[:, :4]).all()  # each value drawn within its own bin
    assert np.abs(again[:, 4] - codes[:, 4]).max() <= 1  # an integer column rounds: it may cross an edge
    assert back["creatinine"].between(0.2, 15).all() and (back["age"] == frame["age"]).all()
    beyond = frame.head(2).assign(creatinine=[-5.0, 40.0])  # beyond the bounds: the outer bins
    assert codec.discretise(beyond, 10)[:, 1].tolist() == [0, 9]


def test_a_synthesizer_needs_the_bounds_of_every_continuous_column():
    with pytest.raises(ValueError, match="no valid_low/valid_high"):
        TableCodec([CodecColumn("lab", "numeric", None, 10)])
    TableCodec([CodecColumn("lab", "numeric", None, 10)], require_bounds=False)  # decoding only
