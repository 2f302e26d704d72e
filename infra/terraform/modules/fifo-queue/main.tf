# A FIFO queue: messages of one group are delivered in order, one group member in flight at a
# time, and sends repeating a deduplication id within five minutes are accepted once.

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
  description = "The queue's name without the \".fifo\" suffix, which the module adds."
  type        = string
}

variable "content_based_deduplication" {
  description = "Whether a send without a deduplication id is deduplicated on the SHA-256 of its body."
  type        = bool
  default     = false
}

variable "visibility_timeout_seconds" {
  description = "How long a received message stays hidden from other consumers (0-43200)."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags for the queue."
  type        = map(string)
  default     = {}
}

resource "aws_sqs_queue" "queue" {
  name                        = "${var.name}.fifo"
  fifo_queue                  = true
  content_based_deduplication = var.content_based_deduplication
  visibility_timeout_seconds  = var.visibility_timeout_seconds
  tags                        = var.tags
}

output "queue_url" {
  value = aws_sqs_queue.queue.id
}

output "queue_arn" {
  value = aws_sqs_queue.queue.arn
}
