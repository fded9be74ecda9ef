-- Argo CD health check for qdd.dev/QwenDisaggDeployment.
-- argocd-cm key: resource.customizations.health.qdd.dev_QwenDisaggDeployment (docs/install.md).
--
-- Healthy     the operator has observed the current generation and Ready is True.
-- Degraded    (current generation) Degraded or Stalled is True, or PlanValid is False:
--             the message is that condition's message. Except a stalled rollout
--             (ProgressDeadlineExceeded) while an older generation still serves: Progressing.
-- Progressing otherwise: no status yet, an older status.observedGeneration (a spec change the
--             operator has not reconciled), endpoints rolling out or starting.
-- Conditions that carry an observedGeneration older than metadata.generation are ignored.

local hs = {}

local function current(c, generation)
  return c.observedGeneration == nil or generation == nil or c.observedGeneration == generation
end

local function message(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local generation = obj.metadata and obj.metadata.generation or nil
local status = obj.status

if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the qdd operator to reconcile"
  return hs
end

if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the qdd operator to observe generation " .. tostring(generation) ..
    " (status is for generation " .. tostring(status.observedGeneration) .. ")"
  return hs
end

local conds = {}
if status.conditions ~= nil then
  for _, c in ipairs(status.conditions) do
    if c.type ~= nil and current(c, generation) then
      conds[c.type] = c
    end
  end
end

local function is(ctype, value)
  return conds[ctype] ~= nil and conds[ctype].status == value
end

-- A rollout past spec.rollout.progressDeadlineSeconds while an older generation still serves
-- (status.rollout.serving is not the current generation/slot, nothing Degraded): the application
-- serves, so Progressing, with the stall (its age and cause) in the message (docs/rollouts.md#stalled).
local rollout = status.rollout
local stalled = conds["Stalled"]
if stalled ~= nil and stalled.status == "True" and stalled.reason == "ProgressDeadlineExceeded" and
    rollout ~= nil and rollout.serving ~= nil and rollout.generation ~= nil and rollout.slot ~= nil and
    rollout.serving ~= (rollout.generation .. "/" .. rollout.slot) and rollout.phase ~= "Recreating" and
    not is("Degraded", "True") then
  local serving = string.match(rollout.serving, "^([^/]*)") or rollout.serving
  hs.status = "Progressing"
  hs.message = "generation " .. serving .. " serves; the rollout to generation " .. rollout.generation ..
    " is stalled: " .. message(stalled, "Stalled")
  return hs
end

if is("Stalled", "True") then
  hs.status = "Degraded"
  hs.message = message(conds["Stalled"], "Stalled")
  return hs
end
if is("PlanValid", "False") then
  hs.status = "Degraded"
  hs.message = message(conds["PlanValid"], "The spec cannot be planned")
  return hs
end
if is("Degraded", "True") then
  hs.status = "Degraded"
  hs.message = message(conds["Degraded"], "Degraded")
  return hs
end

if is("Ready", "True") then
  hs.status = "Healthy"
  hs.message = message(conds["Ready"], "Ready")
  return hs
end

hs.status = "Progressing"
hs.message = message(conds["Ready"], "Waiting for the endpoints to become ready")
return hs
