from .arrow import Parquet

FORMAT = Parquet()
