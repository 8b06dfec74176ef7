//! Who asks the API server: the [`Reviewer`] trait, so that the gate is tested without an API
//! server, and [`ApiReviewer`], the API server's TokenReview and SubjectAccessReview.
use std::future::Future;

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// What an authorization review answers: whether the user may, and the reason given.
pub type Verdict = anyhow::Result<(bool, String)>;

/// Asks the API server who a token belongs to and what that user may do.
pub trait Reviewer: Send + Sync + 'static {
    /// The user a bearer token authenticates as; `None` if it authenticates no one.
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = anyhow::Result<Option<UserInfo>>> + Send;

    /// Whether `user` may use `verb` on the non-resource URL `path`, and the reason given.
    fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> impl Future<Output = Verdict> + Send;
}

/// The API server's TokenReview and SubjectAccessReview (RBAC: `create` on
/// `authentication.k8s.io/tokenreviews` and `authorization.k8s.io/subjectaccessreviews`).
#[derive(Clone)]
pub struct ApiReviewer {
    client: Client,
}

impl ApiReviewer {
    pub fn new(client: Client) -> ApiReviewer {
        ApiReviewer { client }
    }
}

impl Reviewer for ApiReviewer {
    async fn authenticate(&self, token: &str) -> anyhow::Result<Option<UserInfo>> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .context("creating a TokenReview")?;
        let status = answer.status.unwrap_or_default();
        Ok(match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Some(user),
            _ => None,
        })
    }

    async fn authorize(&self, user: &UserInfo, verb: &str, path: &str) -> Verdict {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .context("creating a SubjectAccessReview")?;
        let status = answer
            .status
            .context("the SubjectAccessReview came back without a status")?;
        Ok((
            status.allowed && status.denied != Some(true),
            status.reason.unwrap_or_default(),
        ))
    }
}
