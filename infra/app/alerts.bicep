// Who is told, and about what. Three rules; with an email address, each notifies it through one
// action group (without one, the rules still fire and show under Alerts in the portal, but nobody is told).
//
// 1. Casekeeper alerts (log search alert on the workspace): every alert the code raises
//    (shared/app/alerts.py: checkpoint_failure, checkpoint_lag, effect_escalated) notifies once. The query
//    is alert-records.kql. How "once" holds:
//    - the code emits one ERROR record per alert: it claims the alert's durable record first, so a
//      repeat of the same alert (next timer tick, another host) logs nothing;
//    - the rule runs every 5 minutes over the last 5 minutes (evaluation frequency = window), so the
//      windows do not overlap and each record is counted in exactly one evaluation. Azure Monitor waits
//      and retries an evaluation whose data is not yet ingested, so a late record is not skipped;
//    - the result is split by alertId (and alertKind, for the notification's text): each Casekeeper
//      alert is its own alert instance, so two alerts in one window send two notifications, and one
//      alert that somehow logged twice in a window sends one;
//    - the rule is stateless (autoMitigate false): an instance that fires notifies, and it fires in the
//      one window that holds its record.
// 2. Dead letters on the case-events queue (metric alert, DeadletteredMessages of the queue's entity):
//    a message failed its last delivery (10 by default) or expired. Stateful: it notifies when the count rises above zero and resolves
//    once the dead-letter queue is empty again.
// 3. Function failures (log search alert on the workspace, function-failures.kql): a function invocation
//    raised, or answered 5xx (such as 503 when the queue cannot be reached). Every trigger logs one ERROR
//    record on casekeeper.invocations when it fails (shared/functions/failures.py); log records are never
//    sampled, whereas Application Insights' requests/failed misses every failure whose trace the sampler
//    dropped (TRACE_SAMPLING_RATIO, 0.25 here: three in four). The 4xx answers the HTTP API and the pages give on
//    purpose (a sender's mistake, a person without the role) log nothing. Split by function; stateful
//    (autoMitigate): it resolves once a window passes without failures.

param location string
param tags object

@description('Name of the action group (created only with an email address).')
param actionGroupName string

@description('Prefix of the alert rules\' names.')
param alertNamePrefix string

@description('Email address every alert is sent to. Optional but recommended: empty creates no action group, and the alerts then reach nobody.')
param alertEmailAddress string = ''

@description('Log Analytics workspace of the Application Insights component (scope of the log search alerts).')
param logAnalyticsWorkspaceId string

@description('Service Bus namespace holding the case-events queue.')
param serviceBusNamespaceId string

@description('The case-events queue (the EntityName dimension of DeadletteredMessages).')
param caseEventsQueueName string

var notify = !empty(alertEmailAddress)

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (notify) {
  name: actionGroupName
  location: 'Global'
  tags: tags
  properties: {
    // At most 12 characters; SMS and email show it as the sender.
    groupShortName: 'casekeeper'
    enabled: true
    emailReceivers: [
      {
        name: 'operator'
        emailAddress: alertEmailAddress
        useCommonAlertSchema: true
      }
    ]
  }
}

// The action group, in the shapes the two rule types take it.
var actionGroupIds = notify ? [
  actionGroup.id
] : []
var metricAlertActions = notify ? [
  {
    actionGroupId: actionGroup.id
  }
] : []

resource alertRecords 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${alertNamePrefix}-casekeeper-alert'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Casekeeper alert raised'
    description: 'An alert Casekeeper raised (checkpoint_failure, checkpoint_lag, effect_escalated): a person must look. One notification per alertId. README: What to watch.'
    severity: 1
    enabled: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: loadTextContent('alert-records.kql')
          timeAggregation: 'Count'
          dimensions: [
            {
              name: 'alertId'
              operator: 'Include'
              values: [
                '*'
              ]
            }
            {
              name: 'alertKind'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: false
    // AppTraces exists in the workspace only once telemetry has arrived; validating the query at
    // deployment would fail on a new workspace.
    skipQueryValidation: true
    actions: {
      actionGroups: actionGroupIds
    }
  }
}

resource deadLetters 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${alertNamePrefix}-dead-letters'
  location: 'global'
  tags: tags
  properties: {
    description: 'Messages of the ${caseEventsQueueName} queue were dead-lettered: their last delivery failed, or they expired. README: What to watch.'
    severity: 2
    enabled: true
    scopes: [
      serviceBusNamespaceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    targetResourceType: 'Microsoft.ServiceBus/namespaces'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadLetteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                caseEventsQueueName
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    autoMitigate: true
    actions: metricAlertActions
  }
}

resource functionFailures 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${alertNamePrefix}-function-failures'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'Function failures'
    description: 'A function invocation raised or answered 5xx (the API\'s deliberate 4xx answers are not failures). README: What to watch.'
    severity: 2
    enabled: true
    scopes: [
      logAnalyticsWorkspaceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: loadTextContent('function-failures.kql')
          timeAggregation: 'Count'
          dimensions: [
            {
              name: 'function'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    // AppTraces exists in the workspace only once telemetry has arrived.
    skipQueryValidation: true
    actions: {
      actionGroups: actionGroupIds
    }
  }
}

output actionGroupId string = notify ? actionGroup.id : ''
output alertRuleNames array = [
  alertRecords.name
  deadLetters.name
  functionFailures.name
]
