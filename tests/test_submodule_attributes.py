"""After `import hf_ot`, its submodules are attributes (`hf_ot.scale_out.fsdp_arguments(...)`, as README writes),
imported when first used: `import hf_ot` itself imports none of them."""

import subprocess
import sys

CODE = """
import sys
import hf_ot
lazy = ("hf_ot.scale_out", "hf_ot.metrics", "hf_ot.recipes")
assert not [m for m in lazy if m in sys.modules], [m for m in lazy if m in sys.modules]
assert callable(hf_ot.scale_out.fsdp_arguments) and callable(hf_ot.scale_out.config_file)
assert hf_ot.metrics.__name__ == "hf_ot.metrics" and hf_ot.recipes.__name__ == "hf_ot.recipes"
try:
    hf_ot.no_such_thing
except AttributeError as err:
    assert "no_such_thing" in str(err)
else:
    raise AssertionError("hf_ot.no_such_thing did not raise AttributeError")
print("OK")
"""


def test_submodules_are_attributes_imported_when_first_used():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
