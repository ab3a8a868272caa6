"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import shutil
import subprocess

import pytest

from tensorpack_lite.utils import nvml


@pytest.fixture
def nvml_library(monkeypatch):
    """Point NVMLContext at another library (forgetting the one loaded)."""
    def use(name):
        monkeypatch.setattr(nvml, 'LIBRARY_NAME', name)
        monkeypatch.setattr(nvml, '_library', None)
    return use


def test_nvml_missing_library_is_a_clear_error(nvml_library):
    nvml_library('libnvidia-ml-not-installed.so.1')
    with pytest.raises(nvml.NVMLError, match="cannot load the NVIDIA Management Library "
                                             "'libnvidia-ml-not-installed.so.1'") as err:
        with nvml.NVMLContext():
            pass
    assert err.value.code == 12


FAKE_NVML_C = r"""
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct { unsigned int gpu, memory; } util_t;
static int initialised = 0;
int nvmlInit_v2(void) { initialised = 1; return 0; }
int nvmlShutdown(void) { initialised = 0; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { if (!initialised) return 1; *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) { *h = (void *)(long)(i + 1); return 0; }
int nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
    const char *name = (long)h == 1 ? "Fake GPU A" : "Fake GPU B";
    unsigned int k = 0;
    for (; name[k] && k + 1 < len; k++) buf[k] = name[k];
    buf[k] = 0;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
    if ((long)h == 2) return 3;
    m->total = 1000; m->free = 400; m->used = 600; return 0;
}
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) { u->gpu = 42; u->memory = 7; return 0; }
const char *nvmlErrorString(int code) { return code == 3 ? "Not Supported" : "Other"; }
"""


@pytest.mark.skipif(shutil.which('gcc') is None, reason='needs gcc to build a fake libnvidia-ml')
def test_nvml_context_with_a_fake_library(tmp_path, nvml_library):
    source = tmp_path / 'fake_nvml.c'
    source.write_text(FAKE_NVML_C)
    library = tmp_path / 'libfakenvml.so'
    subprocess.run(['gcc', '-shared', '-fPIC', '-o', str(library), str(source)], check=True, timeout=60)
    nvml_library(str(library))
    with nvml.NVMLContext() as ctx:
        assert ctx.num_devices() == 2
        first, second = ctx.devices()
        assert [first.name(), second.name()] == ['Fake GPU A', 'Fake GPU B']
        assert first.memory() == {'total': 1000, 'free': 400, 'used': 600}
        assert second.utilization() == {'gpu': 42, 'memory': 7}
        with pytest.raises(nvml.NVMLError, match=r'nvmlDeviceGetMemoryInfo\(\) failed with code 3: '
                                                 'Not Supported') as err:
            second.memory()
        assert err.value.code == 3
        with pytest.raises(ValueError, match=r'device\(2\): NVML found 2 GPU\(s\)'):
            ctx.device(2)
    with pytest.raises(nvml.NVMLError, match='nvmlDeviceGetCount_v2.*code 1: Other'):
        ctx.num_devices()             # after the context: NVML is shut down
