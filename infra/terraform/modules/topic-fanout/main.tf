# A topic fanning out to queues: one subscription per queue, each with an optional SNS filter
# policy and raw delivery (the body as published instead of SNS's JSON envelope).

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
  description = "The topic's name (end it with \".fifo\" for a FIFO topic, whose subscribers must be FIFO queues)."
  type        = string
}

variable "subscriptions" {
  description = "Subscribers by a name of your choice: the queue's ARN, a filter policy (JSON, or null for every message) and whether delivery is raw."
  type = map(object({
    queue_arn     = string
    filter_policy = string
    raw_delivery  = bool
  }))
  default = {}
}

variable "tags" {
  description = "Tags for the topic."
  type        = map(string)
  default     = {}
}

resource "aws_sns_topic" "topic" {
  name       = var.name
  fifo_topic = length(regexall("\\.fifo$", var.name)) > 0
  tags       = var.tags
}

resource "aws_sns_topic_subscription" "subscription" {
  for_each             = var.subscriptions
  topic_arn            = aws_sns_topic.topic.arn
  protocol             = "sqs"
  endpoint             = each.value.queue_arn
  filter_policy        = each.value.filter_policy
  raw_message_delivery = each.value.raw_delivery
}

output "topic_arn" {
  value = aws_sns_topic.topic.arn
}

output "subscription_arns" {
  value = { for name, s in aws_sns_topic_subscription.subscription : name => s.arn }
}
