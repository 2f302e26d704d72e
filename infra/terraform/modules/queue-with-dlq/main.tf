# A standard queue with its dead-letter queue: messages received `max_receive_count` times
# without being deleted move to "<name>-dlq", where they keep their ids and can be redriven.

terraform {
  required_version = ">= 0.15"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 3.39"
    }
  }
}

variable "name" {
  description = "The queue's name; the dead-letter queue is named \"<name>-dlq\"."
  type        = string
}

variable "max_receive_count" {
  description = "Receives after which an undeleted message moves to the dead-letter queue (1-1000)."
  type        = number
  default     = 5
}

variable "visibility_timeout_seconds" {
  description = "How long a received message stays hidden from other consumers (0-43200)."
  type        = number
  default     = 30
}

variable "message_retention_seconds" {
  description = "How long the queue keeps a message (60-1209600)."
  type        = number
  default     = 345600
}

variable "dlq_message_retention_seconds" {
  description = "How long the dead-letter queue keeps a message; longer than the queue's, so that a dead letter outlives its original."
  type        = number
  default     = 1209600
}

variable "tags" {
  description = "Tags for both queues."
  type        = map(string)
  default     = {}
}

resource "aws_sqs_queue" "dlq" {
  name                      = "${var.name}-dlq"
  message_retention_seconds = var.dlq_message_retention_seconds
  tags                      = var.tags
}

resource "aws_sqs_queue" "queue" {
  name                       = var.name
  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = var.message_retention_seconds
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })
  tags = var.tags
}

output "queue_url" {
  value = aws_sqs_queue.queue.id
}

output "queue_arn" {
  value = aws_sqs_queue.queue.arn
}

output "dlq_url" {
  value = aws_sqs_queue.dlq.id
}

output "dlq_arn" {
  value = aws_sqs_queue.dlq.arn
}
