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


STEPPED = [CodecColumn("score", "integer", 0, 100, step=10),       # 11 levels: discrete, code 6 is 60
           CodecColumn("dose", "numeric", 0.5, 3.0, step=0.25),     # continuous, rounded onto its levels
           CodecColumn("steps", "integer", 0, 10000, step=5),       # 2001 levels > MAX_LEVELS: continuous
           CodecColumn("odd", "integer", 5, 98, step=10)]           # levels 5, 15, ..., 95 (98 is no level)


def _on_levels(values, low, step, top):
    k = (np.asarray(values, float) - low) / step
    return bool(np.all(np.abs(k - np.rint(k)) < 1e-9) and np.all(values >= low) and np.all(values <= top))


def test_a_stepped_integer_column_is_discrete_by_level_and_decodes_onto_its_levels():
    codec = TableCodec(STEPPED)
    assert [c.name for c in codec.discrete] == ["score", "odd"] and codec.cardinalities == [11, 10]
    assert [c.name for c in codec.continuous] == ["dose", "steps"] and STEPPED[2].cardinality is None
    raw = pd.DataFrame({"score": [87.0, 93.0, 64.9, 104.0, -7.0, np.nan], "dose": [0.61, 0.63, 3.4, 0.1, 1.1, 2.0],
                        "steps": [7.4, 7.6, 10003.0, -2.0, 42.0, 5.0], "odd": [98.0, 9.0, 11.0, 0.0, 51.0, 5.0]})
    decoded = codec.decode(raw)
    assert decoded["score"].tolist()[:5] == [90, 90, 60, 100, 0] and np.isnan(decoded["score"].iloc[5])
    assert decoded["dose"].tolist() == [0.5, 0.75, 3.0, 0.5, 1.0, 2.0]
    assert decoded["steps"].tolist() == [5, 10, 10000, 0, 40, 5]
    assert decoded["odd"].tolist() == [95, 5, 15, 5, 55, 5]  # 98 is beyond the last level, 95
    labelled = codec.labels(decoded)
    assert labelled["score"].tolist()[:2] == [90, 90] and str(labelled["score"].dtype) == "Int64"
    # flow inputs: codes 0..k-1 of the levels, not of the whole numbers between them; back onto the levels
    frame = decoded.iloc[:5]
    x = codec.flow_inputs(frame)
    assert x[:, 2].tolist() == [9, 9, 6, 10, 0] and x[:, 3].tolist() == [9, 0, 1, 0, 5]
    back = codec.from_flow(x + np.array([0, 0, 0.4, -0.3]))  # dequantized codes round to the same level
    pd.testing.assert_frame_equal(back[["score", "odd"]], frame[["score", "odd"]])


def test_binning_a_stepped_column_round_trips_onto_its_levels():
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"score": rng.integers(0, 11, 300) * 10.0, "dose": 0.5 + rng.integers(0, 11, 300) * 0.25,
                          "steps": rng.integers(0, 2001, 300) * 5.0, "odd": 5 + rng.integers(0, 10, 300) * 10.0})
    codec = TableCodec(STEPPED)
    assert codec.domain(8) == [11, 8, 8, 10]  # AIM/MST see one code per level of the discrete columns
    codes = codec.discretise(frame, bins=8)
    assert (codes[:, 0] == frame["score"] / 10).all() and (codes[:, 3] == (frame["odd"] - 5) / 10).all()
    back = codec.undiscretise(codes, 8, np.random.default_rng(0))
    assert (back["score"] == frame["score"]).all() and (back["odd"] == frame["odd"]).all()
    assert _on_levels(back["score"], 0, 10, 100) and _on_levels(back["odd"], 5, 10, 95)
    assert _on_levels(back["dose"], 0.5, 0.25, 3.0) and _on_levels(back["steps"], 0, 5, 10000)
    # any code a mechanism may emit, not only those of real rows, lands on a level
    anything = np.column_stack([rng.integers(0, d, 500) for d in codec.domain(8)])
    drawn = codec.undiscretise(anything, 8, np.random.default_rng(1))
    assert _on_levels(drawn["score"], 0, 10, 100) and _on_levels(drawn["dose"], 0.5, 0.25, 3.0)
    assert _on_levels(drawn["steps"], 0, 5, 10000) and _on_levels(drawn["odd"], 5, 10, 95)
    assert drawn["score"].nunique() > 5 and not set(drawn["score"]) & {87.0, 93.0}


def test_the_spec_step_reaches_the_codec_and_is_validated(tmp_path):
    from privehr.core.specs import EHRTableSpec, VariableBounds

    spec = EHRTableSpec(name="t", attributes=[{"name": "score", "kind": "integer", "valid_low": 0, "valid_high": 100,
                                               "step": 10}, {"name": "age", "kind": "integer", "valid_low": 18,
                                                             "valid_high": 100}])
    codec = TableCodec.from_spec(spec, ["score", "age"])
    assert codec.columns[0].step == 10 and codec.cardinalities == [11, 83]
    assert codec.decode(pd.DataFrame({"score": [87.0], "age": [40.4]})).iloc[0].tolist() == [90, 40]
    for bad, match in [({"kind": "integer", "valid_low": 0, "step": 0}, "positive"),
                       ({"kind": "numeric", "valid_high": 10, "step": 1}, "give valid_low"),
                       ({"kind": "integer", "valid_low": 0, "step": 2.5}, "whole-number step"),
                       ({"kind": "integer", "valid_low": 0.5, "step": 2}, "whole-number step"),
                       ({"kind": "ordinal", "categories": [1, 2], "step": 1}, "step belongs to integer and numeric")]:
        with pytest.raises(ValueError, match=match):
            VariableBounds(name="x", **bad)
    assert VariableBounds(name="x", kind="numeric", valid_low=0.5, step=0.25).step == 0.25
    assert VariableBounds(name="x").step is None  # optional: specs without it load as before
