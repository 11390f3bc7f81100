"""One SparkSession for every Spark test: local[2], no UI, few shuffle partitions.

The Python workers Spark starts must run this venv's interpreter and import
this checkout, so PYSPARK_PYTHON and PYTHONPATH are set before the JVM starts
(local mode passes the driver's environment on to its workers).
"""

import os
import pathlib
import shutil
import sys

import pytest

ROOT = str(pathlib.Path(__file__).resolve().parents[2])

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime (apt-get install default-jre-headless)", allow_module_level=True)


def spark_env() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no reverse-DNS guess of the address
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != ROOT]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


@pytest.fixture(scope="session")
def spark():
    spark_env()
    from pyspark.sql import SparkSession

    from hpbroker.spark import register

    session = (SparkSession.builder.master("local[2]").appName("hpbroker-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
               .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    return str(path)
