"""Bad input: the launcher does not take the target's inputs."""


def kda_decode(q, k, v, state):
    return v
