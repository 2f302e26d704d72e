# An order-processing layout on Sluice: an "orders" topic fanning out to a billing queue (every
# order) and a shipping queue (only orders that ship), each with its dead-letter queue, plus a
# FIFO queue for per-customer ledger updates.
#
#   terraform init
#   terraform apply -var sluice_url=http://127.0.0.1:8080 \
#     -var access_key_id=... -var secret_access_key=...

terraform {
  required_version = ">= 0.15"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 3.39"
    }
  }
}

variable "sluice_url" {
  description = "Sluice's base URL, e.g. http://127.0.0.1:8080 (the same listener as the REST API)."
  type        = string
}

variable "region" {
  description = "Sluice's --aws-region."
  type        = string
  default     = "us-east-1"
}

variable "access_key_id" {
  description = "An access key of the tenant (POST /v1/admin/tenants/{id}/access-keys)."
  type        = string
}

variable "secret_access_key" {
  description = "Its secret."
  type        = string
  sensitive   = true
}

variable "prefix" {
  description = "Prefix of every name, so several copies can share a tenant."
  type        = string
  default     = "shop"
}

provider "aws" {
  region     = var.region
  access_key = var.access_key_id
  secret_key = var.secret_access_key

  # Sluice serves SQS, SNS and STS GetCallerIdentity on one listener. The account id comes
  # from STS, so the provider needs no skip_requesting_account_id.
  #
  # IAM and EC2 point at Sluice too, which refuses them at once: providers before 4.0 call
  # IAM GetUser and EC2 DescribeAccountAttributes while configuring, and would otherwise retry
  # them against AWS for about a minute per command where AWS is unreachable, before going on
  # without their answers. Newer providers make neither call.
  endpoints {
    sqs = var.sluice_url
    sns = var.sluice_url
    sts = var.sluice_url
    iam = var.sluice_url
    ec2 = var.sluice_url
  }
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}

module "billing" {
  source            = "../modules/queue-with-dlq"
  name              = "${var.prefix}-billing"
  max_receive_count = 5
  tags              = { team = "payments" }
}

module "shipping" {
  source                     = "../modules/queue-with-dlq"
  name                       = "${var.prefix}-shipping"
  max_receive_count          = 3
  visibility_timeout_seconds = 120
  tags                       = { team = "logistics" }
}

module "ledger" {
  source                      = "../modules/fifo-queue"
  name                        = "${var.prefix}-ledger"
  content_based_deduplication = true
}

module "orders" {
  source = "../modules/topic-fanout"
  name   = "${var.prefix}-orders"
  subscriptions = {
    billing = {
      queue_arn     = module.billing.queue_arn
      filter_policy = null
      raw_delivery  = false
    }
    shipping = {
      queue_arn     = module.shipping.queue_arn
      filter_policy = jsonencode({ shipping = ["standard", "express"] })
      raw_delivery  = true
    }
  }
  tags = { domain = "orders" }
}

output "billing_queue_url" {
  value = module.billing.queue_url
}

output "shipping_queue_url" {
  value = module.shipping.queue_url
}

output "ledger_queue_url" {
  value = module.ledger.queue_url
}

output "orders_topic_arn" {
  value = module.orders.topic_arn
}
