"""Peon's shipped configuration, installed as package data under the name ``peon._config``.

Nothing here is code: the files beside this one are read with ``importlib.resources``.
"""
