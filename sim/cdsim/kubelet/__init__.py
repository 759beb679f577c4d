"""The simulated kubelet: pulls pods' images, runs their containers, plays the kubelet's DRA part.

One process for every simulated node (started by the cluster after kwok). ``pulls`` and
``imagestore`` pull images from the cluster's registry, ``podspec`` turns a pod spec into what
runs (``runtimespec`` and ``containers``: runc), ``runner`` keeps the containers going,
``cdi`` resolves CDI device IDs as a container runtime would, ``dra`` decides what to prepare
and unprepare, ``plugins`` registers DRA plugins and calls them, ``node`` drives one node's DRA
work, and ``main`` ties it together.
"""
