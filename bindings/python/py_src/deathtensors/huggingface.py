"""deathtensors 0.3.0's Hugging Face Hub helpers are not part of this
package: it never touches the network. Each name exists so that a 0.3.0
program fails with this explanation rather than an ImportError: download
with ``huggingface_hub`` (``hf_hub_download``) and open the local file with
``deathtensors.open``; upload with ``huggingface_hub.upload_file``."""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import DeathTensorsError

_WHY = (
    "the Hugging Face Hub helpers of deathtensors 0.3.0 are left out: this package never touches the network. "
    "Download with huggingface_hub.hf_hub_download and open the file with deathtensors.open; "
    "upload with huggingface_hub.upload_file"
)


def _absent(name: str) -> Any:
    def absent(*args: Any, **kwargs: Any) -> NoReturn:
        raise DeathTensorsError(f"{name}: {_WHY}")

    absent.__name__ = absent.__qualname__ = name
    absent.__doc__ = f"Not available: {_WHY}."
    return absent


push_to_hub = _absent("push_to_hub")
load_from_hub = _absent("load_from_hub")
push_sharded_to_hub = _absent("push_sharded_to_hub")
load_sharded_from_hub = _absent("load_sharded_from_hub")
list_repo_models = _absent("list_repo_models")
hub_model_info = _absent("hub_model_info")
convert_safetensors_on_hub = _absent("convert_safetensors_on_hub")
HubCachedFile = _absent("HubCachedFile")

__all__ = [
    "push_to_hub",
    "load_from_hub",
    "push_sharded_to_hub",
    "load_sharded_from_hub",
    "list_repo_models",
    "hub_model_info",
    "convert_safetensors_on_hub",
    "HubCachedFile",
]
