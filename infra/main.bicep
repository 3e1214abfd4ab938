// Casekeeper on Azure: one resource group holding the function app (Flex Consumption, Python), its
// host storage, Cosmos DB, Service Bus, Key Vault and monitoring (Application Insights, the alert rules
// of app/alerts.bicep, the workbook of app/workbook.bicep). Every connection is identity-based (a
// user-assigned managed identity); no account key, connection string or secret is in this file, in
// either parameters file or in the deployment's outputs. azure.yaml deploys it with azd
// (main.parameters.json); main.az.parameters.json serves az deployment.
//
// App settings of the function app, and what reads each one
// ---------------------------------------------------------
// Read by the code (shared/app/settings.py SETTINGS, validated at first use by Settings.from_mapping):
//   CASEKEEPER_STORE                     = cosmos. shared/app/bootstrap.open_store picks the Cosmos DB store.
//   CosmosDBConnection__accountEndpoint  = Cosmos DB endpoint. The code's Cosmos client, and the
//                                          Functions host: the reconciler's trigger has connection
//                                          "CosmosDBConnection".
//   COSMOS_DATABASE                      = the database. The code, and the trigger's %COSMOS_DATABASE%.
//   CASEKEEPER_QUEUE                     = servicebus. shared/app/bootstrap.open_sender sends to Service Bus.
//   ServiceBusConnection__fullyQualifiedNamespace
//                                        = <namespace>.servicebus.windows.net. The code's ServiceBusClient
//                                          (shared/messaging/servicebus.py), and the host: case_worker's trigger has
//                                          connection "ServiceBusConnection".
//   CASE_EVENTS_QUEUE                    = case-events. The sender, and the trigger's %CASE_EVENTS_QUEUE%.
//   WEBHOOK_SECRET                       = Key Vault reference to the webhook-secret secret. shared/handlers/ingress
//                                          verifies webhook HMAC signatures with it (comma-separated
//                                          values while rotating).
//   EASY_AUTH_ENABLED                    = true when authClientId configures App Service Authentication; only
//                                          then does shared/web/identity trust X-MS-CLIENT-PRINCIPAL.
//   CALL_TIMEOUT_SECONDS                 = how long a started effect is presumed in flight (reconciler).
//   LATE_WATCH_SECONDS                   = how long an effect a person resolved failed is still looked up by key.
//   SUPPLIER_PORTAL_URL                  = base URL of the supplier portal (shared/supplier/portal.py).
//   SUPPLIER_TIMEOUT_SECONDS             = per-phase HTTP timeout of a supplier call (4x below CALL_TIMEOUT_SECONDS).
//   VARIANCE_TOLERANCE                   = invoice variance rule (shared/domain/invoice.Rules).
//   APPROVAL_THRESHOLD                   = credit-note amount above which a person approves first (Rules).
//   AZURE_OPENAI_ENDPOINT                = when set with the deployment, a model proposes
//   AZURE_OPENAI_DEPLOYMENT                (shared/workflow/proposers.AgentProposer); empty: rules propose.
//   AZURE_OPENAI_API_KEY                 = Key Vault reference to the openai-api-key secret when a key is given;
//                                          empty: the app's identity (Cognitive Services OpenAI User).
//   AZURE_OPENAI_API_VERSION             = Azure OpenAI data-plane API version (shared/workflow/model_client).
//   AZURE_OPENAI_TIMEOUT_SECONDS         = one model call's whole budget, at most 120; the SDK retries nothing.
//   CHECKPOINT_HEALTH_SCHEDULE           = 6-field NCRONTAB. The host's timer (%CHECKPOINT_HEALTH_SCHEDULE%)
//                                          for checkpoint_health; the code validates its shape.
//   CHECKPOINT_LAG_SECONDS               = checkpoint-health lag threshold (shared/handlers/health).
//   CHECKPOINT_MAX_BYTES                 = checkpoints larger than this are refused at save (Cosmos DB
//                                          documents are at most 2 MB); shared/workflow/checkpoints.
//   FUTURE_SKEW_SECONDS                  = how far ahead of the store's clock an occurredAt may be (door, 400).
//   INVOICE_WAIT_SECONDS                 = how long facts may wait for their invoice before invoice_missing.
//   ALERT_WEBHOOK_URL                    = Key Vault reference when given, else empty. shared/app/alerts.Alerter
//                                          POSTs every alert there.
//   ALERT_NOTIFY_GRACE_SECONDS           = the timer's wait before it notifies an alert its recorder did not.
//   CLOSED_CASE_RETENTION_DAYS, SETTLED_EFFECT_RETENTION_DAYS, FINISHED_CHECKPOINT_RETENTION_DAYS,
//   ALERT_RETENTION_DAYS, FAILURE_RETENTION_DAYS
//                                        = days a finished document is kept after its last write (Cosmos DB
//                                          time to live, stamped per document by shared/app/retention.py;
//                                          the containers have defaultTtl -1). 0 keeps them forever.
//   RETRY_BASE_SECONDS, RETRY_MAX_DELAY_SECONDS, RETRY_FOR_SECONDS
//                                        = backoff of an event after a transient error (shared/messaging/retry):
//                                          delayed copies instead of redeliveries that burn the count.
//   APPLICATIONINSIGHTS_CONNECTION_STRING
//                                        = the Application Insights component. The host's telemetry, and
//                                          the code's settings (app/functionapp.bicep sets it).
//   TRACE_SAMPLING_RATIO                 = share of traces the code exports (traceSamplingRatio, 0.25 by
//                                          default), through azure-monitor-opentelemetry's sampling_ratio.
//                                          Logs (alerts included) and metrics are never sampled; kept spans
//                                          carry the rate, so sum(ItemCount) counts every case event.
//   AGENT_FRAMEWORK_SPANS                = false: Agent Framework's own per-executor spans stay off (most of
//                                          the tracing CPU); true while debugging a workflow.
// Read by the Functions host and the Azure SDKs:
//   AzureWebJobsStorage__accountName     = host storage account, identity-based (with __credential =
//                                          managedidentity and __clientId).
//   CosmosDBConnection__credential, CosmosDBConnection__clientId, ServiceBusConnection__credential,
//   ServiceBusConnection__clientId       = select the user-assigned identity for the triggers' connections.
//   APPLICATIONINSIGHTS_AUTHENTICATION_STRING
//                                        = Entra ID auth for the host's telemetry.
//   PYTHON_ENABLE_OPENTELEMETRY          = true: with host.json's "telemetryMode": "OpenTelemetry", the
//                                          Python worker streams its own telemetry and joins the host's
//                                          trace context (app/functionapp.bicep says why not the
//                                          PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY variant).
//   AZURE_CLIENT_ID                      = the identity azure-identity's DefaultAzureCredential uses.
//   AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentSessions
//                                        = sessions per instance in Azure (the capacity model below),
//                                          over host.json's 8, which suits the local host's SQLite file.
// Set by the platform, not as app settings (Flex Consumption deprecates both as app settings):
//   FUNCTIONS_EXTENSION_VERSION          = ~4, set by the Flex Consumption backend.
//   FUNCTIONS_WORKER_RUNTIME             = python: functionAppConfig.runtime (pythonVersion: 3.11-3.13,
//                                          3.13 by default; see the parameter).
// Deliberately not set in Azure (local development and tests only):
//   CASEKEEPER_SQLITE_PATH, CASEKEEPER_LOCAL_QUEUE_PATH, and COSMOS_KEY (keys are disabled on the
//   account; unset, the code uses managed identity).
//   ServiceBusConnection, CosmosDBConnection (the connection-string forms of the two connections, for the
//   emulators; keys are disabled on both resources here, so only the identity-based forms above work).
//   STORE_TIMEOUT_SECONDS: unset, each store keeps its own timeout (tests and chaos runs shorten it).
//   OTEL_EXPORTER_OTLP_ENDPOINT and CASEKEEPER_TELEMETRY_FILE: telemetry goes to Application Insights
//   here (shared/app/telemetry.configure); these pick OTLP or a console file where it is not configured.

targetScope = 'resourceGroup'

@minLength(1)
@maxLength(64)
@description('Name of the environment (e.g. dev, prod): tags every resource and seeds the unique resource names.')
param environmentName string

@minLength(1)
@description('Region of every resource; it must offer the Flex Consumption plan.')
param location string = resourceGroup().location

@minLength(3)
@maxLength(12)
@description('Short prefix of resource names: lowercase letters and digits.')
param appName string = 'casekeeper'

@description('Extra tags for every resource.')
param tags object = {}

// -- function app --

// 3.11 is the oldest the code runs on (enum.StrEnum, datetime.UTC; pyproject.toml requires-python).
// The default is the version the Functions worker's own indexing check runs on
// (tests/triggers/test_worker_indexing.py); tests/unit/test_infra.py keeps the three in step.
@allowed([
  '3.11'
  '3.12'
  '3.13'
])
@description('Python version of the function app (requirements.txt pins azure-functions per version).')
param pythonVersion string = '3.13'

// -- Capacity: the model of docs/performance.md#capacity, in integers --

@minValue(1000)
@description('Cases a day this deployment is sized for. The instance ceiling and the Cosmos DB autoscale maximum follow from it unless set themselves (docs/performance.md#capacity).')
param casesPerDay int = 1000000

// The model's figures. tests/unit/test_capacity.py evaluates the formulas below with them and checks them
// against host.json, the function app's settings and docs/performance.md.
var capacityModel = {
  // The busiest hour against the day's average.
  peakFactor: 3
  // Queue messages per case, in tenths: every case's invoice, and for about 3 in 10 a credit note,
  // an approval answer or a PO update.
  messagesPerCaseTenths: 13
  // Cosmos DB request units per case (docs/performance.md#capacity, from make bench's per-path counts): 16 within
  // tolerance, 39 with a credit note, 43 with a PO update, about 94 for a case that waits for a person; above
  // every case of one or two messages.
  requestUnitsPerCase: 45
  // maxConcurrentSessions of the case worker in Azure (host.json keeps 8 for the local host's one SQLite file).
  sessionsPerInstance: 16
  // host.json sessionIdleTimeout: how long a session slot waits for the case's next message.
  sessionIdleMs: 1000
  // Wall time of one message in region: 4 to 6 store round trips (15 for an approval answer), the supplier's call, the complete.
  messageMs: 150
  // CPU of one message, rounded up from make bench's measured CPU per case (docs/performance.md): with the
  // sessions above, an instance's messages use at most half the 1 vCPU of a 2,048 MB instance.
  cpuMsPerMessage: 25
  // Scale-out headroom over the peak (model calls, slower regions, redeliveries).
  headroom: 2
}
var peakMessagesPerSecond = casesPerDay * capacityModel.messagesPerCaseTenths * capacityModel.peakFactor / (10 * 86400)
var messagesPerInstancePerSecond = capacityModel.sessionsPerInstance * 1000 / (capacityModel.sessionIdleMs + capacityModel.messageMs)
var modelMaximumInstanceCount = min(1000, max(10, capacityModel.headroom * (peakMessagesPerSecond / messagesPerInstancePerSecond + 1)))
var peakRequestUnitsPerSecond = casesPerDay * capacityModel.requestUnitsPerCase * capacityModel.peakFactor / 86400
var modelCosmosMaxThroughput = max(1000, (peakRequestUnitsPerSecond / 1000 + 1) * 1000)

@minValue(0)
@maxValue(1000)
@description('Flex Consumption maximum instance count (the documented range is 1 to 1000); 0: from casesPerDay and the capacity model.')
param maximumInstanceCount int = 0

@allowed([
  512
  2048
  4096
])
@description('Flex Consumption instance memory (MB).')
param instanceMemoryMB int = 2048

@description('Flex Consumption always-ready instances. One for the case worker, so the first message after a quiet spell does not wait for a cold start; [] saves its baseline cost.')
param alwaysReady array = [
  {
    name: 'function:case_worker'
    instanceCount: 1
  }
]

// -- Cosmos DB --

@description('Cosmos DB database name (COSMOS_DATABASE).')
param cosmosDatabaseName string = 'casekeeper'

@description('Cosmos DB serverless (true) or database-level autoscale throughput (false). Fixed at account creation.')
param cosmosServerless bool = true

@minValue(0)
@description('Autoscale maximum RU/s when cosmosServerless is false; 0: from casesPerDay and the capacity model.')
param cosmosAutoscaleMaxThroughput int = 0

// -- Service Bus --

@allowed([
  'Standard'
  'Premium'
])
@description('Service Bus tier. Standard is shared and throttles past about 1,000 operations a second (about 2-3 million cases a day); Premium has dedicated messaging units (docs/performance.md#capacity). Changing tier later is a migration.')
param serviceBusSku string = 'Standard'

@allowed([
  1
  2
  4
  8
  16
])
@description('Messaging units when serviceBusSku is Premium.')
param serviceBusPremiumMessagingUnits int = 1

@description('Queue of case events (CASE_EVENTS_QUEUE).')
param caseEventsQueueName string = 'case-events'

@description('Duplicate detection window of the queue (ISO 8601 duration, PT20S to P7D).')
param duplicateDetectionWindow string = 'P1D'

@description('Lock duration of the queue (at most PT5M).')
param queueLockDuration string = 'PT5M'

@minValue(1)
@description('Deliveries before a message is dead-lettered.')
param queueMaxDeliveryCount int = 10

// -- secrets: passed at deployment time, stored in Key Vault only --

@secure()
@minLength(32)
@description('HMAC secret of the event webhook (WEBHOOK_SECRET), at least 32 characters; "new,old" while rotating. Stored as a Key Vault secret.')
param webhookSecret string

@secure()
@description('Optional URL every alert is POSTed to (ALERT_WEBHOOK_URL). Chat webhook URLs embed a token, so it is stored in Key Vault too.')
param alertWebhookUrl string = ''

@secure()
@description('Optional Azure OpenAI key (AZURE_OPENAI_API_KEY), stored in Key Vault. Empty: the app\'s identity authenticates (give azureOpenAIResourceId for its role).')
param azureOpenAIApiKey string = ''

@description('Key Vault purge protection (irreversible once on).')
param keyVaultPurgeProtection bool = true

// A deleted vault keeps its name for the soft-delete retention (90 days), and with purge protection
// nobody can purge it sooner; a fixed name would make `azd down` then `azd up` fail for that long. azure.yaml's
// postdown hook therefore draws a new suffix into the azd environment (AZURE_KEY_VAULT_SUFFIX) after every
// `azd down`, so the next provision names a new vault and the old one stays recoverable, as purge protection
// intends.
@maxLength(8)
@description('Appended to the Key Vault name (lowercase letters and digits); azure.yaml\'s postdown hook sets a new one after each azd down.')
param keyVaultNameSuffix string = ''

// -- application settings --

@minLength(1)
@description('Base URL of the supplier portal API (SUPPLIER_PORTAL_URL).')
param supplierPortalUrl string

@minValue(1)
@description('CALL_TIMEOUT_SECONDS: how long a started effect is presumed in flight before it is reconciled.')
param callTimeoutSeconds int = 120

@minValue(1)
@description('LATE_WATCH_SECONDS: how long an effect a person resolved failed is still looked up by key (at least callTimeoutSeconds).')
param lateWatchSeconds int = 86400

@minValue(1)
@description('SUPPLIER_TIMEOUT_SECONDS: per-phase timeout of a supplier call; 4x it must be below callTimeoutSeconds.')
param supplierTimeoutSeconds int = 10

@description('VARIANCE_TOLERANCE: variance within which an invoice is approved (decimal string).')
param varianceTolerance string = '5.00'

@description('APPROVAL_THRESHOLD: credit-note amount above which a person approves first (decimal string).')
param approvalThreshold string = '1000.00'

@description('CHECKPOINT_HEALTH_SCHEDULE: 6-field NCRONTAB schedule of the checkpoint-health timer.')
param checkpointHealthSchedule string = '0 */5 * * * *'

@minValue(1)
@description('CHECKPOINT_LAG_SECONDS: checkpoint lag that raises a checkpoint-health alert.')
param checkpointLagSeconds int = 600

@minValue(1)
@description('FUTURE_SKEW_SECONDS: how far ahead of the store clock an event occurredAt may be before the door refuses it.')
param futureSkewSeconds int = 300

@minValue(1)
@description('INVOICE_WAIT_SECONDS: how long a case may hold facts without its invoice before the timer alerts invoice_missing.')
param invoiceWaitSeconds int = 86400

@minValue(1000)
@maxValue(2000000)
@description('CHECKPOINT_MAX_BYTES: checkpoints larger than this are refused at save time.')
param checkpointMaxBytes int = 1500000

// Retention (docs/performance.md: at 10M cases a day, about 45 GB a day would otherwise stay forever).
@minValue(0)
@description('CLOSED_CASE_RETENTION_DAYS: days a closed or approved case, and the records that deduplicate its events, are kept; 0: forever.')
param closedCaseRetentionDays int = 90

@minValue(0)
@description('SETTLED_EFFECT_RETENTION_DAYS: days a done or failed effect is kept once its case is closed or approved; 0: forever.')
param settledEffectRetentionDays int = 90

@minValue(0)
@description('FINISHED_CHECKPOINT_RETENTION_DAYS: days a run\'s checkpoints are kept (all of them once the case is final); 0: forever.')
param finishedCheckpointRetentionDays int = 7

@minValue(0)
@description('ALERT_RETENTION_DAYS: days a notified alert is kept; 0: forever.')
param alertRetentionDays int = 30

@minValue(0)
@description('FAILURE_RETENTION_DAYS: days alerted checkpoint failures, rejected events and lookup failures are kept; 0: forever.')
param failureRetentionDays int = 30

@description('TRACE_SAMPLING_RATIO: share of traces exported, from 0 to 1 (decimal string). Logs, alerts and metrics are never sampled.')
param traceSamplingRatio string = '0.25'

@description('AGENT_FRAMEWORK_SPANS: Agent Framework\'s own per-executor spans too (for debugging; they cost CPU on every case).')
param agentFrameworkSpans bool = false

@description('Optional Azure OpenAI endpoint (AZURE_OPENAI_ENDPOINT); set together with azureOpenAIDeployment.')
param azureOpenAIEndpoint string = ''

@description('Optional Azure OpenAI chat deployment name (AZURE_OPENAI_DEPLOYMENT).')
param azureOpenAIDeployment string = ''

@description('AZURE_OPENAI_API_VERSION: the Azure OpenAI data-plane API version.')
param azureOpenAIApiVersion string = '2024-10-21'

@minValue(1)
@maxValue(120)
@description('AZURE_OPENAI_TIMEOUT_SECONDS: one model call\'s whole budget; a slower call is retried later by a delayed copy of its event.')
param azureOpenAITimeoutSeconds int = 30

@description('Client id of the Microsoft Entra ID app registration that signs people in to the approval and operations pages (App Service Authentication), with the app roles Casekeeper.Approver and Casekeeper.Operator. Empty: no sign-in; the machine API works and the pages answer 401.')
param authClientId string = ''

@description('Optional resource id of the Azure OpenAI account: when given, the app identity gets Cognitive Services OpenAI User on it.')
param azureOpenAIResourceId string = ''

// -- a developer running the app locally against this environment (docs/func-start.md) --

@description('Principal (object) id of a developer who runs the app on their machine (func start) against this environment: app/developer-rbac.bicep grants it the data roles. azd passes the signed-in account (AZURE_PRINCIPAL_ID). Empty: no developer access.')
param principalId string = ''

@allowed([
  'User'
  'ServicePrincipal'
  'Group'
])
@description('What kind of principal principalId is.')
param principalType string = 'User'

// -- network --
// Public network access stays on by default: this template creates no virtual network or private
// endpoints, and the Flex Consumption app reaches the services over their public endpoints (with local
// auth off, Entra ID identities only). A production deployment that adds VNet integration and private
// endpoints sets these to Disabled (docs/design.md#threats).

@description('Cosmos DB public network access: Disabled with a private endpoint.')
@allowed([
  'Enabled'
  'Disabled'
])
param cosmosPublicNetworkAccess string = 'Enabled'

@description('Service Bus public network access: Disabled needs the Premium tier and a private endpoint.')
@allowed([
  'Enabled'
  'Disabled'
])
param serviceBusPublicNetworkAccess string = 'Enabled'

@description('Key Vault public network access: Disabled with a private endpoint; Key Vault references then resolve over the VNet.')
@allowed([
  'Enabled'
  'Disabled'
])
param keyVaultPublicNetworkAccess string = 'Enabled'

@description('Storage public network access: Disabled with private endpoints (blob, queue, table); azd deploy then needs a runner inside the network.')
@allowed([
  'Enabled'
  'Disabled'
])
param storagePublicNetworkAccess string = 'Enabled'

// -- monitoring --

@description('Application Insights accepts only Entra ID-authenticated telemetry.')
param appInsightsDisableLocalAuth bool = true

@description('Email address the alerts are sent to (app/alerts.bicep). Optional but recommended: empty creates no action group, and the alerts then show in the portal only.')
param alertEmailAddress string = ''

// -- names --

var resourceToken = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName, location))
var prefix = toLower(replace(appName, '-', ''))
var allTags = union(tags, {
  'azd-env-name': environmentName
  application: 'casekeeper'
})
var names = {
  identity: 'id-${prefix}-${resourceToken}'
  logAnalytics: 'log-${prefix}-${resourceToken}'
  applicationInsights: 'appi-${prefix}-${resourceToken}'
  storage: take('st${prefix}${resourceToken}', 24)
  cosmos: 'cosmos-${prefix}-${resourceToken}'
  serviceBus: 'sb-${prefix}-${resourceToken}'
  keyVault: '${take('kv${prefix}${resourceToken}', 24 - length(keyVaultNameSuffix))}${keyVaultNameSuffix}'
  plan: 'plan-${prefix}-${resourceToken}'
  functionApp: 'func-${prefix}-${resourceToken}'
  actionGroup: 'ag-${prefix}-${resourceToken}'
  alertPrefix: 'alert-${prefix}-${resourceToken}'
}
var deploymentContainerName = 'app-package'

// The Azure OpenAI account named by azureOpenAIResourceId:
// /subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.CognitiveServices/accounts/<name>
// Without one, a placeholder id in this resource group keeps every index below in range, so the
// (skipped) module's scope can be evaluated whatever order the engine evaluates it in.
var grantOpenAI = !empty(azureOpenAIResourceId)
var openAIIdParts = split(grantOpenAI ? azureOpenAIResourceId : '${resourceGroup().id}/providers/Microsoft.CognitiveServices/accounts/none', '/')

// -- resources --

module identity 'app/identity.bicep' = {
  name: 'identity'
  params: {
    name: names.identity
    location: location
    tags: allTags
  }
}

module monitoring 'app/monitoring.bicep' = {
  name: 'monitoring'
  params: {
    location: location
    tags: allTags
    logAnalyticsName: names.logAnalytics
    applicationInsightsName: names.applicationInsights
    disableLocalAuth: appInsightsDisableLocalAuth
  }
}

module storage 'app/storage.bicep' = {
  name: 'storage'
  params: {
    location: location
    tags: allTags
    name: names.storage
    deploymentContainerName: deploymentContainerName
    publicNetworkAccess: storagePublicNetworkAccess
  }
}

module cosmos 'app/cosmos.bicep' = {
  name: 'cosmos'
  params: {
    location: location
    tags: allTags
    accountName: names.cosmos
    databaseName: cosmosDatabaseName
    serverless: cosmosServerless
    autoscaleMaxThroughput: cosmosAutoscaleMaxThroughput > 0 ? cosmosAutoscaleMaxThroughput : modelCosmosMaxThroughput
    publicNetworkAccess: cosmosPublicNetworkAccess
  }
}

module serviceBus 'app/servicebus.bicep' = {
  name: 'servicebus'
  params: {
    location: location
    tags: allTags
    namespaceName: names.serviceBus
    queueName: caseEventsQueueName
    duplicateDetectionWindow: duplicateDetectionWindow
    lockDuration: queueLockDuration
    maxDeliveryCount: queueMaxDeliveryCount
    publicNetworkAccess: serviceBusPublicNetworkAccess
    sku: serviceBusSku
    premiumMessagingUnits: serviceBusPremiumMessagingUnits
  }
}

module keyVault 'app/keyvault.bicep' = {
  name: 'keyvault'
  params: {
    location: location
    tags: allTags
    name: names.keyVault
    webhookSecret: webhookSecret
    alertWebhookUrl: alertWebhookUrl
    openAIApiKey: azureOpenAIApiKey
    enablePurgeProtection: keyVaultPurgeProtection
    publicNetworkAccess: keyVaultPublicNetworkAccess
  }
}

module rbac 'app/rbac.bicep' = {
  name: 'rbac'
  params: {
    principalId: identity.outputs.principalId
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.namespaceName
    serviceBusQueueName: serviceBus.outputs.queueName
    cosmosAccountName: cosmos.outputs.accountName
    keyVaultName: keyVault.outputs.name
    applicationInsightsName: monitoring.outputs.applicationInsightsName
  }
}

module developerRbac 'app/developer-rbac.bicep' = if (!empty(principalId)) {
  name: 'developer-rbac'
  params: {
    principalId: principalId
    principalType: principalType
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.namespaceName
    serviceBusQueueName: serviceBus.outputs.queueName
    cosmosAccountName: cosmos.outputs.accountName
  }
}

module openAIRbac 'app/openai-rbac.bicep' = if (grantOpenAI) {
  name: 'openai-rbac'
  scope: resourceGroup(openAIIdParts[2], openAIIdParts[4])
  params: {
    principalId: identity.outputs.principalId
    accountName: last(openAIIdParts)
  }
}

// The application's settings: every name here is one the code reads (see the header).
var appSettings = {
  CASEKEEPER_STORE: 'cosmos'
  CosmosDBConnection__accountEndpoint: cosmos.outputs.endpoint
  CosmosDBConnection__credential: 'managedidentity'
  CosmosDBConnection__clientId: identity.outputs.clientId
  COSMOS_DATABASE: cosmos.outputs.databaseName
  CASEKEEPER_QUEUE: 'servicebus'
  ServiceBusConnection__fullyQualifiedNamespace: serviceBus.outputs.fullyQualifiedNamespace
  ServiceBusConnection__credential: 'managedidentity'
  ServiceBusConnection__clientId: identity.outputs.clientId
  CASE_EVENTS_QUEUE: serviceBus.outputs.queueName
  WEBHOOK_SECRET: '@Microsoft.KeyVault(SecretUri=${keyVault.outputs.webhookSecretUri})'
  // Only where App Service Authentication is configured is X-MS-CLIENT-PRINCIPAL the platform's.
  EASY_AUTH_ENABLED: string(!empty(authClientId))
  CALL_TIMEOUT_SECONDS: string(callTimeoutSeconds)
  LATE_WATCH_SECONDS: string(lateWatchSeconds)
  SUPPLIER_PORTAL_URL: supplierPortalUrl
  SUPPLIER_TIMEOUT_SECONDS: string(supplierTimeoutSeconds)
  VARIANCE_TOLERANCE: varianceTolerance
  APPROVAL_THRESHOLD: approvalThreshold
  AZURE_OPENAI_ENDPOINT: azureOpenAIEndpoint
  AZURE_OPENAI_DEPLOYMENT: azureOpenAIDeployment
  AZURE_OPENAI_API_KEY: empty(azureOpenAIApiKey) ? '' : '@Microsoft.KeyVault(SecretUri=${keyVault.outputs.openAIApiKeySecretUri})'
  AZURE_OPENAI_API_VERSION: azureOpenAIApiVersion
  AZURE_OPENAI_TIMEOUT_SECONDS: string(azureOpenAITimeoutSeconds)
  CHECKPOINT_HEALTH_SCHEDULE: checkpointHealthSchedule
  CHECKPOINT_LAG_SECONDS: string(checkpointLagSeconds)
  CHECKPOINT_MAX_BYTES: string(checkpointMaxBytes)
  FUTURE_SKEW_SECONDS: string(futureSkewSeconds)
  INVOICE_WAIT_SECONDS: string(invoiceWaitSeconds)
  ALERT_WEBHOOK_URL: empty(alertWebhookUrl) ? '' : '@Microsoft.KeyVault(SecretUri=${keyVault.outputs.alertWebhookUrlSecretUri})'
  ALERT_NOTIFY_GRACE_SECONDS: '30'
  CLOSED_CASE_RETENTION_DAYS: string(closedCaseRetentionDays)
  SETTLED_EFFECT_RETENTION_DAYS: string(settledEffectRetentionDays)
  FINISHED_CHECKPOINT_RETENTION_DAYS: string(finishedCheckpointRetentionDays)
  ALERT_RETENTION_DAYS: string(alertRetentionDays)
  FAILURE_RETENTION_DAYS: string(failureRetentionDays)
  RETRY_BASE_SECONDS: '1'
  RETRY_MAX_DELAY_SECONDS: '300'
  RETRY_FOR_SECONDS: '3600'
  TRACE_SAMPLING_RATIO: traceSamplingRatio
  AGENT_FRAMEWORK_SPANS: string(agentFrameworkSpans)
}

module functionApp 'app/functionapp.bicep' = {
  name: 'functionapp'
  // Roles first: the host's first calls (storage, Key Vault references, Service Bus, Cosmos DB)
  // then find them in place.
  dependsOn: [
    rbac
  ]
  params: {
    location: location
    tags: allTags
    planName: names.plan
    functionAppName: names.functionApp
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerName: deploymentContainerName
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    pythonVersion: pythonVersion
    maximumInstanceCount: maximumInstanceCount > 0 ? maximumInstanceCount : modelMaximumInstanceCount
    maxConcurrentSessions: capacityModel.sessionsPerInstance
    instanceMemoryMB: instanceMemoryMB
    alwaysReady: alwaysReady
    appSettings: appSettings
    authClientId: authClientId
  }
}

module alerts 'app/alerts.bicep' = {
  name: 'alerts'
  params: {
    location: location
    tags: allTags
    actionGroupName: names.actionGroup
    alertNamePrefix: names.alertPrefix
    alertEmailAddress: alertEmailAddress
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsId
    serviceBusNamespaceId: serviceBus.outputs.namespaceId
    caseEventsQueueName: serviceBus.outputs.queueName
  }
}

module workbook 'app/workbook.bicep' = {
  name: 'workbook'
  params: {
    location: location
    tags: allTags
    displayName: 'Casekeeper (${environmentName})'
    logAnalyticsWorkspaceId: monitoring.outputs.logAnalyticsId
    serviceBusNamespaceId: serviceBus.outputs.namespaceId
  }
}

// -- outputs (no secrets) --

output functionAppName string = functionApp.outputs.name
output functionAppDefaultHostName string = functionApp.outputs.defaultHostName
output cosmosEndpoint string = cosmos.outputs.endpoint
output cosmosDatabaseName string = cosmos.outputs.databaseName
output serviceBusNamespace string = serviceBus.outputs.namespaceName
output serviceBusFullyQualifiedNamespace string = serviceBus.outputs.fullyQualifiedNamespace
output caseEventsQueueName string = serviceBus.outputs.queueName
output keyVaultName string = keyVault.outputs.name
output managedIdentityClientId string = identity.outputs.clientId
// For `casekeeper local-settings azd --host-storage azure` (a developer's host on this storage account).
output storageAccountName string = storage.outputs.name
@description('Empty when no alertEmailAddress was given: the alerts then reach nobody.')
output alertActionGroupId string = alerts.outputs.actionGroupId
