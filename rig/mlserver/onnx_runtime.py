"""An MLServer runtime serving one ONNX file through ONNX Runtime.

MLServer ships no ONNX runtime of its own: a model's ``model-settings.json``
names this class (``"implementation": "onnx_runtime.OnnxModel"``, with this
folder on ``PYTHONPATH``). Its ``parameters``:

- ``uri``: the ONNX file, relative to the model folder (resolved with
  ``mlserver.utils.get_model_uri``: a bare relative path would be resolved
  against the server's working directory instead);
- ``version``: what the server reports serving in its repository index (the
  mfsched actuators write the variant there);
- ``extra.threads``: ONNX Runtime's intra-op threads (default 1); inter-op
  threads are 1 (one graph, run sequentially).

The model's metadata (``GET /v2/models/{name}``) reports what the session was
opened with, under ``parameters``: ``uri`` (the file's name), ``threads`` and
``version``, so a client can check what is served, not only what was asked.

Inference runs on a worker thread so the server's event loop (readiness,
repository calls) answers while a batch runs.
"""

import asyncio
import os

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse, MetadataModelResponse, Parameters
from mlserver.utils import get_model_uri


class OnnxModel(MLModel):
    async def load(self) -> bool:
        path = await get_model_uri(self._settings)
        extra = {}
        if self._settings.parameters is not None and self._settings.parameters.extra:
            extra = self._settings.parameters.extra
        threads = int(extra.get("threads", 1))
        if threads < 1:
            raise ValueError(f"{self.name}: parameters.extra.threads must be >= 1, got {threads}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            path, options, providers=["CPUExecutionProvider"]
        )
        self._input = self._session.get_inputs()[0].name
        self._served = {
            "uri": os.path.basename(path),
            "threads": threads,
            "version": self._settings.parameters.version if self._settings.parameters else None,
        }
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32, copy=False)
        (y,) = await asyncio.to_thread(self._session.run, None, {self._input: x})
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[NumpyCodec.encode_output("output", y)],
        )

    async def metadata(self) -> MetadataModelResponse:
        meta = await super().metadata()
        meta.parameters = Parameters(**self._served)
        return meta
