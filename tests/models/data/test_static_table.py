import numpy as np
import pandas as pd

from privehr.models.data.static_table import SHIFTED_AGE, static_table


def test_static_table_means_over_hours_and_demographics():
    window = np.full((3, 4, 2), np.nan)
    window[0, :2, 0] = [80.0, 100.0]
    window[1, :, 1] = 7.0
    demo = pd.DataFrame({"age": [45.0, 300.2, 70.0], "gender": ["M", "F", "M"]}, index=pd.Index([11, 12, 13]))
    t = static_table(np.array([13, 11, 12]), window, ["heart rate", "ph"], demo)
    assert list(t.columns) == ["age", "gender_male", "heart rate (24h mean)", "ph (24h mean)"]
    assert list(t.index) == [13, 11, 12]
    assert list(t["age"]) == [70.0, 45.0, SHIFTED_AGE]  # the shifted > 89 ages
    assert list(t["gender_male"]) == [1.0, 1.0, 0.0]
    assert t.loc[13, "heart rate (24h mean)"] == 90.0 and np.isnan(t.loc[11, "heart rate (24h mean)"])
    assert t.loc[11, "ph (24h mean)"] == 7.0
