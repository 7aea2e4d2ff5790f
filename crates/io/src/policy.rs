//! Rego policies, evaluated with `regorus` before a file's keys are
//! released: cryptotensors' `__policy__` (its `local` module), and ours
//! (the `__policy__` global metadata of deathtensors files). A policy is a
//! module of package `model` whose rule `allow` must be exactly `true` for
//! the caller's `input` (see `docs/SECURITY.md` for what this can and cannot
//! enforce: it binds honest readers; whoever holds a key can skip it).

/// The rule a policy must make true.
const RULE: &str = "data.model.allow";

/// Evaluates `rego` against `input` (JSON; no input if `None`); `Err` says
/// why access is refused.
pub(crate) fn evaluate(rego: &str, input: Option<&serde_json::Value>) -> Result<(), String> {
    let mut engine = regorus::Engine::new();
    engine.add_policy("model.rego".into(), rego.into()).map_err(|e| format!("the policy does not parse: {e}"))?;
    if let Some(input) = input {
        let value = regorus::Value::from_json_str(&input.to_string()).map_err(|e| format!("bad policy input: {e}"))?;
        engine.set_input(value);
    }
    match engine.eval_rule(RULE.into()) {
        Ok(regorus::Value::Bool(true)) => Ok(()),
        Ok(regorus::Value::Bool(false)) => Err("the policy denies access".into()),
        Ok(regorus::Value::Undefined) => Err("the policy's allow rule is undefined for this input".into()),
        Ok(other) => Err(format!("the policy's allow rule is not a boolean but {other}")),
        Err(e) => Err(format!("the policy cannot be evaluated: {e}")),
    }
}
