"""A local SparkSession tuned for analysing one results directory."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

from pyspark.sql import SparkSession


def spark_session(
    master: str = "local[*]",
    *,
    driver_memory: str = "4g",
    shuffle_partitions: int = 8,
    app_name: str = "chronos-loadtest",
) -> SparkSession:
    """Create (or reuse) the session. ``driver_memory`` only applies when the JVM starts here."""
    scratch = tempfile.mkdtemp(prefix="chronos-loadtest-spark-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    # No Python UDFs are used, but any Python worker should run this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
