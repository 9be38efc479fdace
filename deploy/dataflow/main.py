"""Flex-template entry point: the launcher runs this file with the template's parameters."""

import logging

from realm.pipelines.prepare import run

if __name__ == "__main__":
    logging.getLogger().setLevel(logging.INFO)
    run()
