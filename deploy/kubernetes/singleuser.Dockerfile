# The learners' image for Zero to JupyterHub (values.yaml: singleuser.image): environment.yml's environment, as
# Binder/repo2docker build it, on Jupyter's base image (user jovyan, uid 1000, jupyterhub-singleuser).
# Build from the checkout's root:
#   docker build -f deploy/kubernetes/singleuser.Dockerfile -t REGISTRY/explainer-singleuser:0.1.0 .
# python-3.11 is a moving tag (the newest 3.11 build): pin a dated tag (quay.io/jupyter/base-notebook:YYYY-MM-DD)
# for a workshop.
FROM quay.io/jupyter/base-notebook:python-3.11

USER root
# bubblewrap builds the checks' jail; inside a pod it isolates only where user namespaces are allowed (the node's
# kernel and the pod's seccomp profile): else each check runs under resource limits and says "not isolated".
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
COPY --chown=root:root . /opt/explainer/src

# environment.yml into the image's own environment: its conda set, then its pip set (torch's CPU build and
# `-e .[notebooks,hf]` from /opt/explainer/src, read-only for the learner). JupyterHub on the server side is the
# hub's release (the chart 4.4.0 runs JupyterHub 5.5.0).
RUN mamba env update -n base -f /opt/explainer/src/environment.yml \
 && mamba install -y -n base jupyterhub-singleuser=5.5.0 \
 && mamba clean -afy

# JupyterLab's settings and one notebook-signature store for the image, as scripts/setup.sh writes them for a venv
# (the learner's: JupyterLab writes to it whenever it opens a notebook, and the pod has one learner);
# then what every learner's home starts with (values.yaml copies it at the first start): the notebooks and the
# exercises, never the solutions (as `make hub`'s notebooks/), trusted.
RUN mkdir -p /opt/conda/share/jupyter/lab/settings /opt/conda/etc/jupyter /opt/conda/etc/ipython \
             /opt/conda/share/jupyter/explainer-trust /opt/explainer/notebooks/workshop \
 && printf '%s\n' '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false},' \
      ' "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": false}}' > /opt/conda/share/jupyter/lab/settings/overrides.json \
 && echo '{"ContentsManager": {"pre_save_hook": "explainer.notebook_file.keep_stored_widgets"}}' \
      > /opt/conda/etc/jupyter/jupyter_server_config.json \
 && echo '{"IPKernelApp": {"kernel_class": "explainer.notebook_kernel.NotebookKernel"}}' \
      > /opt/conda/etc/ipython/ipython_kernel_config.json \
 && echo '{"NotebookNotary": {"db_file": "/opt/conda/share/jupyter/explainer-trust/nbsignatures.db", "secret_file": "/opt/conda/share/jupyter/explainer-trust/notebook_secret"}}' \
      > /opt/conda/etc/jupyter/jupyter_config.json \
 && cp /opt/explainer/src/notebooks/*.ipynb /opt/explainer/src/notebooks/*.md /opt/explainer/notebooks/ \
 && cp /opt/explainer/src/notebooks/workshop/exercises.ipynb /opt/explainer/notebooks/workshop/ \
 && jupyter trust /opt/explainer/notebooks/*.ipynb /opt/explainer/notebooks/workshop/*.ipynb \
 && chmod -R a+rX,go-w /opt/explainer \
 && chown -R ${NB_UID}:${NB_GID} /opt/conda/share/jupyter/explainer-trust

USER ${NB_UID}
