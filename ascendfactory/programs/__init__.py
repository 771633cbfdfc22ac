"""Generic programs that plan steps run as subprocesses in a framework's own environment: the Ray node
(`ray_node.py`). A program one framework needs lives in its backend's package (`backends/<b>/programs/`).

They import nothing from ascendfactory (an import contract checks it): that environment may not have it.
"""
