"""What a Lambda invocation runs on, below the engines that use it: the SQS
partial-batch runner (:mod:`.sqs_batch`) and the scheduled tick loop (:mod:`.ticks`).

The scheduler and the workflow engine are independent of each other; this is the
plumbing both of them drive their functions with, written once.
"""
