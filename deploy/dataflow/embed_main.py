"""Flex-template entry point of the embedding pipeline: the launcher runs this file with the template's parameters."""

import logging

from realm.pipelines.embed import run

if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    run()
