"""The simulated kubelet: runs chart pods as processes and plays the kubelet's DRA part.

One process for every simulated node (started by the cluster after kwok). ``podspec`` turns
a pod spec into command lines, ``runner`` keeps those processes going, ``cdi`` resolves CDI
device IDs as a container runtime would, ``dra`` decides what to prepare and unprepare,
``plugins`` registers DRA plugins and calls them, ``node`` drives one node's DRA work, and
``main`` ties it together.
"""
