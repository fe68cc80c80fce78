import json, shutil
from pathlib import Path
def test_save(fuzz_source, master_keys):
    src = json.loads(Path(fuzz_source.removeprefix("file:")).read_text())
    loc = src["location"].removeprefix("file:")
    shutil.rmtree("/tmp/fuzzdev", ignore_errors=True)
    shutil.copytree(loc, "/tmp/fuzzdev/" + Path(loc).name)
    Path("/tmp/fuzzdev/info.json").write_text(json.dumps({"metadata": fuzz_source, "location": src["location"], "keys": {k: v.hex() for k, v in master_keys.items()}}))
