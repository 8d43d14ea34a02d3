# The hub's image for Zero to JupyterHub (values.yaml: hub.image): the chart's own hub image with this package
# added, for the room-code sign-in (explainer.hub.kubernetes) and the board, which runs in the hub pod as a
# service. The package alone: the board and the sign-in need tornado and JupyterHub, which the image has; torch
# and the notebooks' libraries stay in the learners' image.
# Build from the checkout's root:
#   docker build -f deploy/kubernetes/hub.Dockerfile -t REGISTRY/explainer-hub:0.1.0 .
FROM quay.io/jupyterhub/k8s-hub:4.4.0

USER root
COPY --chown=root:root . /tmp/explainer-src
RUN pip install --no-cache-dir --no-deps /tmp/explainer-src && rm -rf /tmp/explainer-src
USER 1000
