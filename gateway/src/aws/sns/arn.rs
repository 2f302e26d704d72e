//! The ARNs the SNS endpoint writes and reads, and how they map onto Sluice's names:
//!
//! - topic `arn:aws:sns:{region}:{account}:{topic}`;
//! - subscription `arn:aws:sns:{region}:{account}:{topic}:{suffix}`, where the REST
//!   subscription id is `{topic}.{suffix}` (the suffix is the random part, so the ARN holds
//!   nothing the id does not);
//! - queue (a subscription's endpoint, a redrive policy's `deadLetterTargetArn`)
//!   `arn:aws:sqs:{region}:{account}:{queue}`.
//!
//! Only the caller's account in this server's region resolves: another account's (or
//! region's) ARN is `NotFound`, as if it did not exist; a malformed one is `InvalidParameter`
//! naming the parameter.

use super::error::SnsError;

/// Where the caller's resources live: this server's region, the caller's account.
#[derive(Debug, Clone, Copy)]
pub struct Home<'a> {
    /// The server's region.
    pub region: &'a str,
    /// The caller's account id.
    pub account: &'a str,
}

impl Home<'_> {
    /// A topic's ARN.
    pub fn topic(&self, topic: &str) -> String {
        format!("arn:aws:sns:{}:{}:{topic}", self.region, self.account)
    }

    /// A subscription's ARN from its REST id (`{topic}.{suffix}`).
    pub fn subscription(&self, id: &str) -> String {
        let (topic, suffix) = id.rsplit_once('.').unwrap_or((id, ""));
        format!(
            "arn:aws:sns:{}:{}:{topic}:{suffix}",
            self.region, self.account
        )
    }

    /// A queue's ARN.
    pub fn queue(&self, queue: &str) -> String {
        format!("arn:aws:sqs:{}:{}:{queue}", self.region, self.account)
    }

    /// The topic name of a topic ARN given as `parameter`.
    pub fn topic_name<'a>(&self, parameter: &str, arn: &'a str) -> Result<&'a str, SnsError> {
        match self.resource(parameter, arn, "sns")?.as_slice() {
            [topic] => Ok(topic),
            _ => Err(malformed(parameter)),
        }
    }

    /// The REST id of a subscription ARN given as `parameter`.
    pub fn subscription_id(&self, parameter: &str, arn: &str) -> Result<String, SnsError> {
        match self.resource(parameter, arn, "sns")?.as_slice() {
            [topic, suffix] => Ok(format!("{topic}.{suffix}")),
            _ => Err(malformed(parameter)),
        }
    }

    /// The queue name of a queue ARN given as `parameter`.
    pub fn queue_name<'a>(&self, parameter: &str, arn: &'a str) -> Result<&'a str, SnsError> {
        match self.resource(parameter, arn, "sqs")?.as_slice() {
            [queue] => Ok(queue),
            _ => Err(malformed(parameter)),
        }
    }

    /// The resource parts (after the account) of an ARN of `service`, if it is ours.
    fn resource<'a>(
        &self,
        parameter: &str,
        arn: &'a str,
        service: &str,
    ) -> Result<Vec<&'a str>, SnsError> {
        let parts: Vec<&str> = arn.split(':').collect();
        let well_formed = parts.len() >= 6
            && parts[0] == "arn"
            && parts[1].starts_with("aws")
            && parts[2] == service
            && !parts[3].is_empty()
            && parts[4].len() == 12
            && parts[4].bytes().all(|b| b.is_ascii_digit())
            && parts[5..].iter().all(|p| !p.is_empty());
        if !well_formed {
            return Err(malformed(parameter));
        }
        if parts[3] != self.region || parts[4] != self.account {
            return Err(match service {
                "sqs" => SnsError::NotFound(format!(
                    "{parameter}: no queue {arn} in this account and region"
                )),
                _ => SnsError::NotFound(format!(
                    "{parameter}: {arn} does not exist in this account and region"
                )),
            });
        }
        Ok(parts[5..].to_vec())
    }
}

fn malformed(parameter: &str) -> SnsError {
    SnsError::invalid(parameter, "is not a well-formed ARN of this kind")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOME: Home<'static> = Home {
        region: "us-east-1",
        account: "123456789012",
    };

    #[test]
    fn arns_round_trip_to_sluice_names() {
        let topic = HOME.topic("orders.fifo");
        assert_eq!(topic, "arn:aws:sns:us-east-1:123456789012:orders.fifo");
        assert_eq!(HOME.topic_name("TopicArn", &topic), Ok("orders.fifo"));
        let sub = HOME.subscription("orders.fifo.0af3");
        assert_eq!(sub, "arn:aws:sns:us-east-1:123456789012:orders.fifo:0af3");
        assert_eq!(
            HOME.subscription_id("SubscriptionArn", &sub).as_deref(),
            Ok("orders.fifo.0af3")
        );
        assert_eq!(HOME.queue_name("Endpoint", &HOME.queue("q")), Ok("q"));
    }

    #[test]
    fn other_accounts_are_not_found_and_malformed_arns_invalid() {
        let code = |r: Result<&str, SnsError>| r.unwrap_err().classify().1;
        assert_eq!(
            code(HOME.topic_name("TopicArn", "arn:aws:sns:us-east-1:999999999999:t")),
            "NotFound"
        );
        assert_eq!(
            code(HOME.topic_name("TopicArn", "arn:aws:sns:eu-west-1:123456789012:t")),
            "NotFound"
        );
        for bad in [
            "t",
            "arn:aws:sqs:us-east-1:123456789012:t",
            "arn:aws:sns:us-east-1:1234:t",
            "arn:aws:sns:us-east-1:123456789012:",
            "arn:aws:sns:us-east-1:123456789012:t:sub",
        ] {
            assert_eq!(
                code(HOME.topic_name("TopicArn", bad)),
                "InvalidParameter",
                "{bad}"
            );
        }
        assert!(HOME
            .subscription_id("SubscriptionArn", "arn:aws:sns:us-east-1:123456789012:t")
            .is_err());
    }
}
