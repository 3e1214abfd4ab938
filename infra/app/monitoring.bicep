// Log Analytics workspace and the workspace-based Application Insights component.

param location string
param tags object
param logAnalyticsName string
param applicationInsightsName string

@description('Accept only Microsoft Entra ID-authenticated telemetry (the app sends APPLICATIONINSIGHTS_AUTHENTICATION_STRING; the identity gets Monitoring Metrics Publisher). Code that exports with azure-monitor-opentelemetry must then pass a credential.')
param disableLocalAuth bool = true

@minValue(30)
@maxValue(730)
param retentionInDays int = 30

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    features: {
      enableLogAccessUsingOnlyResourcePermissions: true
    }
  }
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logAnalytics.id
    IngestionMode: 'LogAnalytics'
    DisableLocalAuth: disableLocalAuth
  }
}

output applicationInsightsName string = applicationInsights.name
output logAnalyticsName string = logAnalytics.name
output applicationInsightsId string = applicationInsights.id
output logAnalyticsId string = logAnalytics.id
